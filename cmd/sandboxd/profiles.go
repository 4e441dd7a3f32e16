package main

// sandboxd profiles check DIR: validate a profiles dir the way serve loads
// it, reporting every problem of every file at once.
//
// sandboxd profiles evaluate DIR NAME URL [METHOD]: try an egress profile,
// a draft in a scratch folder too, on one request, without connecting
// anywhere.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/profiles"
)

const profilesUsage = `usage:
  sandboxd profiles check DIR
  sandboxd profiles evaluate [--json] [--no-resolve] DIR NAME URL [METHOD]
(sandboxd profiles check --help and sandboxd profiles evaluate --help say more)
`

const profilesCheckUsage = `usage: sandboxd profiles check DIR

Validates every profile under DIR (exec/, egress/, seccomp/, datasets/) the
way sandboxd serve loads them. Every problem of every file is reported, one
per line, as FILE:LINE:COLUMN: problem; values that load but deserve a
second look (an allow_cidrs entry that opens an always-denied range) as
FILE:LINE:COLUMN: warning: ....

Exit status: 0 when the profiles load (warnings or not), 1 when they do
not, 2 on a usage error.
`

const profilesEvaluateUsage = `usage: sandboxd profiles evaluate [--json] [--no-resolve] DIR NAME URL [METHOD]

Shows the decision the egress profile NAME makes on a request, as
POST /profiles/{name}/evaluate does, without connecting anywhere and
without a running sandboxd: try a draft before it ships. The profile is
DIR/egress/NAME.yaml, or DIR/NAME.yaml (a scratch folder); only that file is
read, and it must be valid on its own. URL is an absolute http or https
URL, or host:port with METHOD CONNECT; METHOD defaults to GET and is taken
in upper case.

The rules' verdict (and the host pattern that matched) is given apart from
the address check, which resolves the host with this machine's resolver:
where that fails, the overall verdict is decided at connect time.
Approvals (mode approve) are not read: a host that needs one stays denied.

Exit status: 0 allowed, 1 denied, 3 decided at connect time (the rules
allow but the name could not be resolved here), 2 on a usage error, a
profile that does not load or a request that cannot be evaluated.
`

// profilesCmd runs `sandboxd profiles SUBCOMMAND`. resolver resolves names
// for evaluate (nil: this machine's resolver).
func profilesCmd(args []string, stdout, stderr io.Writer, resolver egress.Resolver) int {
	switch {
	case groupHelp(args):
		fmt.Fprint(stdout, profilesUsage)
		return 0
	case len(args) == 0:
		fmt.Fprint(stderr, profilesUsage)
		return 2
	case args[0] == "check":
		return profilesCheck(args[1:], stdout, stderr)
	case args[0] == "evaluate":
		return profilesEvaluate(args[1:], stdout, stderr, resolver)
	}
	fmt.Fprintf(stderr, "sandboxd profiles: unknown subcommand %q\n%s", args[0], profilesUsage)
	return 2
}

// profilesCheck validates a profiles dir and reports every problem.
func profilesCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("profiles check", flag.ContinueOnError)
	if done, code := parseFlags(fs, args, profilesCheckUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, profilesCheckUsage)
		return 2
	}
	dir := fs.Arg(0)
	rep := profiles.Check(dir)
	for _, e := range rep.Errors {
		fmt.Fprintln(stderr, e)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(stderr, w)
	}
	if n := len(rep.Errors); n > 0 {
		fmt.Fprintf(stderr, "sandboxd profiles check: %s in %s, %s; nothing in %s loads until all are fixed\n",
			plural(n, "problem"), plural(countFiles(rep.Errors), "file"), plural(len(rep.Warnings), "warning"), dir)
		return 1
	}
	printSet(stdout, rep.Set)
	if n := len(rep.Warnings); n > 0 {
		fmt.Fprintf(stdout, "%s loads, with %s (above)\n", dir, plural(n, "warning"))
	}
	return 0
}

// printSet lists the profiles and datasets of a loaded set, one per line.
func printSet(w io.Writer, set *profiles.Set) {
	for _, name := range set.Names() {
		p := set.Exec[name]
		fmt.Fprintf(w, "%s: exec profile %q ok (version %s)\n", p.Source, name, p.Version[:12])
	}
	for _, name := range set.EgressNames() {
		p := set.Egress[name]
		src := p.Source
		if src == "" {
			src = filepath.Join(set.Dir, "egress", name+".yaml (absent: built in)")
		}
		fmt.Fprintf(w, "%s: egress profile %q ok (mode %s, version %s)\n", src, name, p.Mode, p.Version[:12])
	}
	for _, name := range set.DatasetNames() {
		ds := set.Datasets[name]
		fmt.Fprintf(w, "%s: dataset %q ok (%s)\n", ds.Source, name, ds.Path)
	}
}

// countFiles counts the files the problems are in.
func countFiles(errs profiles.Errors) int {
	files := map[string]bool{}
	for _, e := range errs {
		files[e.File] = true
	}
	return len(files)
}

// plural writes "1 problem" or "3 problems".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Exit statuses of profiles evaluate.
const (
	evalAllow     = 0
	evalDeny      = 1
	evalError     = 2
	evalAtConnect = 3
)

// evaluateTimeout bounds the lookup of an evaluation.
const evaluateTimeout = 10 * time.Second

// profilesEvaluate tries an egress profile on one request.
func profilesEvaluate(args []string, stdout, stderr io.Writer, resolver egress.Resolver) int {
	fs := flag.NewFlagSet("profiles evaluate", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the answer POST /profiles/{name}/evaluate gives, as JSON")
	noResolve := fs.Bool("no-resolve", false, "do not resolve the host: give the rules' verdict, and leave the address check to connect time")
	if done, code := parseFlags(fs, args, profilesEvaluateUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() < 3 || fs.NArg() > 4 {
		fmt.Fprint(stderr, profilesEvaluateUsage)
		return evalError
	}
	dir, name, target, method := fs.Arg(0), fs.Arg(1), fs.Arg(2), "GET"
	if fs.NArg() == 4 {
		method = fs.Arg(3)
	}
	p, warnings, err := evaluatedProfile(dir, name)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return evalError
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, w)
	}
	if *noResolve {
		resolver = noResolver{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), evaluateTimeout)
	defer cancel()
	ev := (&egress.Checker{Resolver: resolver}).Evaluate(ctx, p, egress.Request{Method: method, Target: target, Client: "evaluate"})
	if ev.Code.BadRequest() {
		fmt.Fprintf(stderr, "sandboxd profiles evaluate: the request cannot be evaluated: %s\n", ev.Reason)
		return evalError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(httpapi.EvaluationBody(&ev, p)); err != nil {
			fmt.Fprintln(stderr, "sandboxd profiles evaluate:", err)
			return evalError
		}
	} else {
		printEvaluation(stdout, &ev, p, target)
	}
	switch ev.Overall {
	case egress.OverallAllow:
		return evalAllow
	case egress.OverallAtConnect:
		return evalAtConnect
	}
	return evalDeny
}

// evaluatedProfile loads the egress profile NAME of dir: dir/egress/NAME.yaml,
// else dir/NAME.yaml, else the built-in none for NAME none.
func evaluatedProfile(dir, name string) (*egress.Profile, []profiles.Warning, error) {
	if strings.ContainsAny(name, `/\`) || name == "" || strings.HasPrefix(name, ".") {
		return nil, nil, fmt.Errorf("sandboxd profiles evaluate: %q is not a profile name; give the file name without .yaml", name)
	}
	candidates := []string{filepath.Join(dir, "egress", name+".yaml"), filepath.Join(dir, name+".yaml")}
	for _, file := range candidates {
		if _, err := os.Stat(file); err == nil {
			return profiles.LoadEgressFile(file)
		}
	}
	if name == egress.NoneName {
		return egress.None(), nil, nil
	}
	return nil, nil, fmt.Errorf("sandboxd profiles evaluate: no egress profile %q: neither %s nor %s exists", name, candidates[0], candidates[1])
}

// printEvaluation writes an evaluation of target for a person.
func printEvaluation(w io.Writer, ev *egress.Evaluation, p *egress.Profile, target string) {
	src := p.Source
	if src == "" {
		src = "built in"
	}
	fmt.Fprintf(w, "profile:       %s (mode %s, version %s) from %s\n", p.Name, p.Mode, p.Version[:12], src)
	fmt.Fprintf(w, "request:       %s %s (host %s, port %d)\n", ev.Method, target, ev.Host, ev.Port)
	if ev.RulesChecked {
		fmt.Fprintf(w, "rules:         %s: %s\n", ev.Rules.Verdict(), ev.Rules.Reason)
	} else {
		fmt.Fprintf(w, "rules:         not checked: %s\n", ev.Reason)
	}
	fmt.Fprintf(w, "address check: %s: %s\n", strings.ReplaceAll(ev.Address.Status, "_", " "), ev.Address.Reason)
	fmt.Fprintf(w, "overall:       %s\n", ev.OverallText())
}

// noResolver resolves nothing, for --no-resolve.
type noResolver struct{}

func (noResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "not looked up (--no-resolve)", Name: host}
}

// logProfileWarnings logs the warnings of a loaded set, at every load.
func logProfileWarnings(log *slog.Logger, set *profiles.Set) {
	for _, w := range set.Warnings {
		log.Warn("profile warning", "file", w.File, "line", w.Line, "column", w.Column, "warning", w.Msg)
	}
}
