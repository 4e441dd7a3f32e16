package safetext

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The hostile-page corpus: testdata/pages/NAME.html with the expected text
// output in NAME.txt and, for some pages, the expected Markdown in NAME.md.
// The expected files are the specification and were reviewed by hand; after
// a deliberate change, regenerate them with
//
//	go test ./browse/safetext/ -run TestGolden -update
//
// and review the diff. A page may start with a comment setting options:
// <!-- safetext: links=full selector=".a, .b" -->; content=main renders
// the main content only, maxoutput=N caps the output.

var update = flag.Bool("update", false, "rewrite the expected outputs of testdata/pages")

// Pages that also have an expected Markdown output.
var mdPages = []string{
	"combined-injection", "exfil-links", "fake-markers", "lists", "markdown-literal",
	"pre-code", "structure", "tables", "hidden-stylesheet", "selector",
}

// neverAppear must not be in any output of any page, in any letter case.
// Hidden content in the corpus carries HIDDEN_ and usually an "IGNORE
// PREVIOUS INSTRUCTIONS"; data planted in URLs (query strings, image
// sources) carries EXFILQ.
var neverAppear = []string{
	"HIDDEN_", "IGNORE PREVIOUS", "EXFILQ",
	"<untrusted-content", "</untrusted-content", "< /untrusted", "＜/untrusted",
	"<|", "<｜", "[INST]", "[/INST]", "<<SYS>>", "<system>", "</system>", "<assistant>",
	"![", "javascript:", "vbscript:", "data:", "file:", "mailto:",
}

// checkOutput asserts the properties every output has.
func checkOutput(t *testing.T, name, out string) {
	t.Helper()
	low := strings.ToLower(out)
	// Markdown escapes (HIDDEN\_, \<\|im\_start) must not let a marker
	// through either; only the image opener is neutralised by escaping.
	unescaped := strings.ReplaceAll(low, `\`, "")
	for _, m := range neverAppear {
		m = strings.ToLower(m)
		if strings.Contains(low, m) {
			t.Errorf("%s: output contains %q", name, m)
		} else if m != "![" && strings.Contains(unescaped, m) {
			t.Errorf("%s: output contains %q once backslashes are removed", name, m)
		}
	}
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8", name)
	}
	for i, r := range out {
		if removed(r) {
			t.Errorf("%s: output contains invisible/control character %U at byte %d", name, r, i)
			break
		}
	}
}

// mdOutsideCode returns Markdown with code blocks and code spans removed.
func mdOutsideCode(md string) string {
	var kept []string
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimLeft(line, " >")
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.Trim(t, "`") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") {
			fence = t[:len(t)-len(strings.TrimLeft(t, "`"))]
			continue
		}
		kept = append(kept, line)
	}
	md = strings.Join(kept, "\n")
	var b strings.Builder
	for i := 0; i < len(md); {
		if md[i] == '\\' && i+1 < len(md) {
			b.WriteString(md[i : i+2])
			i += 2
			continue
		}
		if md[i] != '`' {
			b.WriteByte(md[i])
			i++
			continue
		}
		n := 0
		for i+n < len(md) && md[i+n] == '`' {
			n++
		}
		fence := md[i : i+n]
		end := strings.Index(md[i+n:], fence)
		if end < 0 {
			b.WriteString(fence)
			i += n
			continue
		}
		i += n + end + n
	}
	return b.String()
}

var rawHTML = regexp.MustCompile(`(^|[^\\])<[A-Za-z/!?]`)

// checkMarkdown asserts that Markdown output has no raw HTML and no image.
func checkMarkdown(t *testing.T, name, md string) {
	t.Helper()
	outside := mdOutsideCode(md)
	if m := rawHTML.FindString(outside); m != "" {
		t.Errorf("%s: Markdown contains raw HTML %q", name, m)
	}
	if strings.Contains(outside, "![") {
		t.Errorf("%s: Markdown contains image syntax", name)
	}
}

var optionRE = regexp.MustCompile(`^<!-- safetext:(.*?)-->`)
var optionKV = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

func pageOptions(t *testing.T, html string) Options {
	base, _ := url.Parse("https://example.org/dir/page.html")
	o := Options{BaseURL: base}
	m := optionRE.FindStringSubmatch(html)
	if m == nil {
		return o
	}
	for _, kv := range optionKV.FindAllStringSubmatch(m[1], -1) {
		v := strings.Trim(kv[2], `"`)
		switch kv[1] {
		case "links":
			o.Links = v
		case "selector":
			o.Selector = v
		case "content":
			o.Content = v
		case "maxoutput":
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("maxoutput=%q", v)
			}
			o.MaxOutput = n
		default:
			t.Fatalf("unknown option %q", kv[1])
		}
	}
	return o
}

func render(p Page) string {
	var b strings.Builder
	fmt.Fprintf(&b, "title: %s\ntruncated: %v\n", p.Title, p.Truncated)
	if p.Content != "full" || p.OmittedWords > 0 {
		fmt.Fprintf(&b, "content: %s (%d words, %d left out)\n", p.Content, p.Words, p.OmittedWords)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s: %s\n", w.Code, w.Message)
	}
	for i, l := range p.Links {
		fmt.Fprintf(&b, "link %d: %s\n", i+1, l)
	}
	b.WriteString("---\n")
	b.WriteString(p.Text)
	b.WriteString("\n")
	return b.String()
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/pages/*.html")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 25 {
		t.Fatalf("corpus has %d pages, want at least 25", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".html")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			opts := pageOptions(t, string(src))
			formats := []string{"text"}
			if slices.Contains(mdPages, name) {
				formats = append(formats, "markdown")
			}
			for _, format := range []string{"text", "markdown"} {
				o := opts
				o.Format = format
				p, err := HTML(strings.NewReader(string(src)), o)
				if err != nil {
					t.Fatal(err)
				}
				// Every page, in both formats, is checked for markers.
				checkOutput(t, name+" "+format, p.Text)
				checkOutput(t, name+" title", p.Title)
				for _, l := range p.Links {
					checkOutput(t, name+" link", l)
				}
				if format == "markdown" {
					checkMarkdown(t, name, p.Text)
				}
				if !slices.Contains(formats, format) {
					continue
				}
				ext := map[string]string{"text": ".txt", "markdown": ".md"}[format]
				golden := strings.TrimSuffix(f, ".html") + ext
				got := render(p)
				if *update {
					if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if got != string(want) {
					t.Errorf("%s output differs from %s\n--- got ---\n%s\n--- want ---\n%s", format, golden, got, want)
				}
			}
		})
	}
}
