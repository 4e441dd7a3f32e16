package redact

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The measurement harness: gitleaks' own rule examples (each rule's true
// positives and false positives, from the source of its rule generator),
// redacted by the default Redactor. A positive passes when every byte of
// every secret gitleaks reports in it is redacted; a negative when the text
// comes back unchanged.
//
//	REDACT_GITLEAKS=1 go test -run TestGitleaksExamples -v ./redact/
//
// The examples are extracted once (about two minutes) into the user cache
// directory: the generator of the gitleaks module in go.mod is copied to a
// temporary directory, its Validate is replaced by one that writes each
// example and what gitleaks finds in it (the rule alone, and the whole
// default configuration) as JSON lines, and it is run. REDACT_GITLEAKS_EXAMPLES
// names an existing file instead. REDACT_GITLEAKS_FAILS writes the failures.

type glExample struct {
	Rule     string   `json:"rule"`
	Positive bool     `json:"positive"`
	Text     string   `json:"text"`
	Path     string   `json:"path"`
	Secrets  []string `json:"secrets"` // what the rule alone reports
	Full     []string `json:"full"`    // what the default configuration reports
}

func TestGitleaksExamples(t *testing.T) {
	path := os.Getenv("REDACT_GITLEAKS_EXAMPLES")
	if path == "" {
		if os.Getenv("REDACT_GITLEAKS") == "" {
			t.Skip("set REDACT_GITLEAKS=1 (or REDACT_GITLEAKS_EXAMPLES=file) to score gitleaks' rule examples")
		}
		path = extractGitleaksExamples(t)
	}
	exs := readExamples(t, path)
	r := Default()
	posSeen := map[string]bool{}
	var np, okp, nn, okn, glFlags, twin int
	negs := map[string]bool{}
	for _, e := range exs {
		if !e.Positive {
			negs[e.Text] = true
		}
	}
	var fails []string
	for _, e := range exs {
		if e.Text == "" {
			continue // path-only examples (pkcs12 files)
		}
		ivs := redactRanges(r, []byte(e.Text))
		if e.Positive {
			if posSeen[e.Text] {
				continue // the same text again (generators repeat themselves)
			}
			posSeen[e.Text] = true
			np++
			if secretsCovered(e.Text, e.Secrets, ivs) {
				okp++
			} else {
				out, _ := r.String(e.Text)
				fails = append(fails, fmt.Sprintf("P %s %q -> %q", e.Rule, clip(e.Text), clip(out)))
			}
			continue
		}
		nn++
		if len(e.Full) > 0 {
			glFlags++
		}
		twinOf := positiveRules(exs, e.Text)
		if len(twinOf) > 0 {
			twin++
		}
		if len(ivs) == 0 {
			okn++
		} else {
			// Why it may be changed: the same text is a positive of
			// another rule (or of this one, under another path), or
			// gitleaks' default configuration reports it too.
			why := ""
			switch {
			case len(twinOf) > 0:
				why = " [positive of " + strings.Join(twinOf, ",") + "]"
			case len(e.Full) > 0:
				why = " [gitleaks reports " + strings.Join(e.Full, ",") + "]"
			}
			out, _ := r.String(e.Text)
			fails = append(fails, fmt.Sprintf("N %s%s %q -> %q", e.Rule, why, clip(e.Text), clip(out)))
		}
	}
	sort.Strings(fails)
	for _, f := range fails {
		t.Log(f)
	}
	if p := os.Getenv("REDACT_GITLEAKS_FAILS"); p != "" {
		os.WriteFile(p, []byte(strings.Join(fails, "\n")+"\n"), 0o644)
	}
	t.Logf("positives: %d of %d distinct texts fully redacted (%.1f%%)", okp, np, pct(okp, np))
	t.Logf("negatives: %d of %d changed (%.1f%%); gitleaks' default configuration flags %d (%.1f%%); %d are also the text of a positive",
		nn-okn, nn, pct(nn-okn, nn), glFlags, pct(glFlags, nn), twin)
	if pct(okp, np) < 97 {
		t.Errorf("%.1f%% of positives redacted, want at least 97%%", pct(okp, np))
	}
}

// positiveRules: the rules of which text is a positive example.
func positiveRules(exs []glExample, text string) []string {
	var out []string
	for _, e := range exs {
		if e.Positive && e.Text == text && !slices.Contains(out, e.Rule) {
			out = append(out, e.Rule)
		}
	}
	return out
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// redactRanges returns the merged ranges that the Redactor replaces.
func redactRanges(r *Redactor, b []byte) []cand { return r.find(b) }

// secretsCovered: every occurrence of every secret lies inside the ranges.
func secretsCovered(text string, secrets []string, ivs []cand) bool {
	if len(secrets) == 0 {
		return len(ivs) > 0
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for off := 0; ; {
			i := strings.Index(text[off:], s)
			if i < 0 {
				break
			}
			if !covered(ivs, int64(off+i), int64(off+i+len(s))) {
				return false
			}
			off += i + 1
		}
	}
	return true
}

func covered(ivs []cand, s, e int64) bool {
	for _, iv := range ivs {
		if iv.start <= s && s < iv.end {
			s = iv.end
		}
		if s >= e {
			return true
		}
	}
	return s >= e
}

func readExamples(t *testing.T, path string) []glExample {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	var out []glExample
	for sc.Scan() {
		var e glExample
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// extractGitleaksExamples runs gitleaks' rule generator with a Validate
// that records the examples, once per gitleaks version.
func extractGitleaksExamples(t *testing.T) string {
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/zricethezav/gitleaks/v8").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(mod)), " ")
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "sandboxd-redact", "gitleaks-examples-"+version+".jsonl")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	os.MkdirAll(filepath.Dir(out), 0o755)
	src := filepath.Join(t.TempDir(), "gitleaks")
	if err := copyTree(dir, src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "cmd/generate/config/utils/validate.go"), []byte(recordingValidate), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", filepath.Join(t.TempDir(), "gitleaks.toml"))
	cmd.Dir = filepath.Join(src, "cmd/generate/config")
	cmd.Env = append(os.Environ(), "EXAMPLES_OUT="+out+".tmp", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gitleaks generator: %v\n%s", err, b)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	return out
}

func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// recordingValidate replaces gitleaks' cmd/generate/config/utils/validate.go
// in the temporary copy: it records instead of checking.
const recordingValidate = `package utils

import (
	"encoding/json"
	"os"
	"strings"
	"sync"

	"github.com/zricethezav/gitleaks/v8/cmd/generate/config/base"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
)

type example struct {
	Rule     string   ` + "`json:\"rule\"`" + `
	Positive bool     ` + "`json:\"positive\"`" + `
	Text     string   ` + "`json:\"text\"`" + `
	Path     string   ` + "`json:\"path,omitempty\"`" + `
	Secrets  []string ` + "`json:\"secrets,omitempty\"`" + `
	Full     []string ` + "`json:\"full,omitempty\"`" + `
}

var (
	mu   sync.Mutex
	out  *json.Encoder
	full *detect.Detector
)

func record(r *config.Rule, d *detect.Detector, text, path string, positive bool) {
	mu.Lock()
	defer mu.Unlock()
	if out == nil {
		f, err := os.Create(os.Getenv("EXAMPLES_OUT"))
		if err != nil {
			panic(err)
		}
		out = json.NewEncoder(f)
		if full, err = detect.NewDetectorDefaultConfig(); err != nil {
			panic(err)
		}
	}
	e := example{Rule: r.RuleID, Positive: positive, Text: text, Path: path}
	if positive {
		for _, f := range d.Detect(detect.Fragment{Raw: text, FilePath: path}) {
			e.Secrets = append(e.Secrets, f.Secret)
		}
	}
	for _, f := range full.Detect(detect.Fragment{Raw: text, FilePath: path}) {
		e.Full = append(e.Full, f.RuleID)
	}
	if err := out.Encode(e); err != nil {
		panic(err)
	}
}

func Validate(rule config.Rule, truePositives []string, falsePositives []string) *config.Rule {
	r := &rule
	d := createSingleRuleDetector(r)
	for _, tp := range truePositives {
		record(r, d, tp, "", true)
	}
	for _, fp := range falsePositives {
		record(r, d, fp, "", false)
	}
	return r
}

func ValidateWithPaths(rule config.Rule, truePositives map[string]string, falsePositives map[string]string) *config.Rule {
	r := &rule
	d := createSingleRuleDetector(r)
	for path, tp := range truePositives {
		record(r, d, tp, path, true)
	}
	for path, fp := range falsePositives {
		record(r, d, fp, path, false)
	}
	return r
}

func createSingleRuleDetector(r *config.Rule) *detect.Detector {
	uniq := make(map[string]struct{})
	var keywords []string
	for _, k := range r.Keywords {
		k = strings.ToLower(k)
		if _, ok := uniq[k]; !ok {
			keywords = append(keywords, k)
			uniq[k] = struct{}{}
		}
	}
	r.Keywords = keywords
	cfg := base.CreateGlobalConfig()
	cfg.Rules = map[string]config.Rule{r.RuleID: *r}
	cfg.Keywords = uniq
	return detect.NewDetector(cfg)
}
`
