// Command agentloop is an agent's tool loop against sandboxd, with a stub
// planner where a model would be: the planner reads the history and names
// the next tool call; the loop runs it through the client package and
// appends the result. It reads a page with fetch_url, then counts its
// words with run_python (the page goes in as stdin: data, never code).
//
//	make run   # prints a development key
//	SANDBOXD_KEY=sbx_... go run ./examples/agentloop --page https://docs.python.org/3/ --profile web-research
//
// The page must be one the egress profile allows. The package's test runs
// the loop against an in-process sandboxd and a loopback page.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/httpapi"
)

// toolCall is what a model's tool-use answer carries.
type toolCall struct {
	Name string
	Args json.RawMessage
}

// step is one call and what the model is shown of its result.
type step struct {
	Call    toolCall
	Result  string
	IsError bool
}

// planner stands in for the model: the next call, or the final answer.
type planner interface {
	Next(history []step) (*toolCall, string)
}

// stubPlanner reads a page, then has Python count its words.
type stubPlanner struct{ page, profile string }

func (p stubPlanner) Next(h []step) (*toolCall, string) {
	switch {
	case len(h) == 0:
		args, _ := json.Marshal(api.FetchRequest{URL: p.page, Profile: p.profile})
		return &toolCall{Name: httpapi.ToolFetchURL, Args: args}, ""
	case h[len(h)-1].IsError:
		return nil, "I could not finish: " + h[len(h)-1].Result
	case len(h) == 1:
		code := "import sys, collections, re\n" +
			"words = re.findall(r\"[A-Za-z]{4,}\", sys.stdin.read())\n" +
			"print(len(words), 'words; most common:', collections.Counter(w.lower() for w in words).most_common(3))\n"
		args, _ := json.Marshal(api.ExecRequest{Language: "python", Code: &code, Stdin: h[0].Result})
		return &toolCall{Name: httpapi.ToolRunPython, Args: args}, ""
	}
	return nil, "The page has " + strings.TrimSpace(h[len(h)-1].Result)
}

// agent runs tool calls for one session.
type agent struct {
	c       *client.Client
	session string
}

// run is the loop: at most maxSteps calls, then the planner's answer.
func (a *agent) run(ctx context.Context, p planner, log io.Writer) (string, error) {
	tools, err := a.c.Tools(ctx) // what a model would be given
	if err != nil {
		return "", err
	}
	for _, t := range tools {
		fmt.Fprintf(log, "tool %s: %.60s...\n", t.Name, t.Description)
	}
	var history []step
	for i := 0; i < 8; i++ {
		call, final := p.Next(history)
		if call == nil {
			return final, nil
		}
		result, isErr := a.dispatch(ctx, call)
		fmt.Fprintf(log, "%s -> error=%v, %d bytes\n", call.Name, isErr, len(result))
		history = append(history, step{Call: *call, Result: result, IsError: isErr})
	}
	return "", fmt.Errorf("no answer after %d steps", len(history))
}

// dispatch runs one call; a refusal becomes an error result whose message
// says what to change, as a model would be shown it.
func (a *agent) dispatch(ctx context.Context, call *toolCall) (string, bool) {
	opts := []client.CallOption{client.SessionID(a.session), client.IdempotencyKey(newID())}
	switch call.Name {
	case httpapi.ToolRunPython:
		var req api.ExecRequest
		if err := json.Unmarshal(call.Args, &req); err != nil {
			return "arguments are not valid JSON: " + err.Error(), true
		}
		res, err := a.c.Exec(ctx, &req, opts...)
		if err != nil {
			return err.Error(), true
		}
		if res.Status != "ok" {
			return fmt.Sprintf("status %s (exit %d): %s%s", res.Status, res.ExitCode, res.Message, res.Stderr), true
		}
		return res.Stdout, false
	case httpapi.ToolFetchURL:
		var req api.FetchRequest
		if err := json.Unmarshal(call.Args, &req); err != nil {
			return "arguments are not valid JSON: " + err.Error(), true
		}
		res, err := a.c.Fetch(ctx, &req, opts...)
		if err != nil {
			return err.Error(), true
		}
		return res.Content, false // still inside its untrusted-content markers
	}
	return "unknown tool " + call.Name, true
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "sandboxd's base URL")
	page := flag.String("page", "https://docs.python.org/3/", "the page to read")
	profile := flag.String("profile", "web-research", "the egress profile of the fetch")
	flag.Parse()
	c, err := client.New(*url, os.Getenv("SANDBOXD_KEY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := &agent{c: c, session: "agentloop-" + newID()[:8]}
	answer, err := a.run(ctx, stubPlanner{page: *page, profile: *profile}, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(answer)
}
