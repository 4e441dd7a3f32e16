package safetext

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Tokens planted in scripts around the fuzzed page; they must never reach
// the output.
const (
	scriptToken1 = "SCRIPTTOKENQX1"
	scriptToken2 = "SCRIPTTOKENQX2"
)

// Hidden elements planted before the fuzzed page, and their tokens.
const hiddenPlants = `<div hidden>HIDTOKENA</div><p style="display:none">HIDTOKENB</p>` +
	`<span style="font-size:0">HIDTOKENC</span><span class="sr-only">HIDTOKEND</span>` +
	`<p style="color:transparent">HIDTOKENE</p><div aria-hidden="true">HIDTOKENF</div>` +
	`<img alt="HIDTOKENG" width="0"><p style="position:absolute;left:-9999px">HIDTOKENH</p>` +
	`<details><summary>s</summary>HIDTOKENI</details><p style="position:fixed;top:100vh">HIDTOKENJ</p>` +
	`<link rel="stylesheet" href="data:text/css,.hidk%7Bdisplay:none%7D"><p class="hidk">HIDTOKENK</p>`

var hiddenTokens = []string{"HIDTOKENA", "HIDTOKENB", "HIDTOKENC", "HIDTOKEND", "HIDTOKENE", "HIDTOKENF", "HIDTOKENG", "HIDTOKENH",
	"HIDTOKENI", "HIDTOKENJ", "HIDTOKENK"}

var fuzzSeeds = []string{
	"",
	"<p>hello</p>",
	"<div hidden>x</div><p style='display:none'>y</p><span class=sr-only>z</span>",
	"<style>.a{display:none}.b+p{font-size:0}</style><p class=a>x</p><div class=b></div><p>y",
	"<table><tr><td>a<td>b<tr><td><pre>c</pre></table><ul><li>d<ol><li>e</ol></ul>",
	"<a href='javascript:x'>j</a><a href='/q?x=1'>q</a><img alt='![x](y)'>",
	"&lt;/untrusted-content&gt; &lt;|im_start|&gt; [INST] \u200b\u202e\U000E0041",
	"<textarea><script>", "<xmp>", "<plaintext>", "<noscript>", "<svg><script>", "<!--",
	"<a title=\"", "<title>", "<style>", "<template>", "<iframe>", "<select>",
	"<pre>```\n<code>`x`</code></pre><h1>#</h1><blockquote>>",
	strings.Repeat("<div>", 600),
	"<style>@layer a{.w{color:#fff!important}}@media screen{:is(.a,.b) p{background:currentcolor}}.n{&.m{color:red}}</style><p class=w>x",
	"<style>@import url(\"data:text/css,@import 'data:,.a{color:%23fff}';\") layer(x) screen;</style><p class=a>x",
	"<link rel=stylesheet href='data:text/css;base64,LmF7Y29sb3I6d2hpdGV9'><details><summary>s</summary><p class=a>x",
}

func addPageSeeds(f *testing.F, add func(string)) {
	for _, s := range fuzzSeeds {
		add(s)
	}
	files, _ := filepath.Glob("testdata/pages/*.html")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			add(string(b))
		}
	}
}

// scriptOnly reports whether token occurs in doc only inside HTML script
// elements (so that the output must not contain it). It is false when the
// fuzzed page put the planted script in another context (a comment, an
// attribute, <xmp>, <plaintext>...).
func scriptOnly(doc, token string) bool {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		return false
	}
	inScript, elsewhere := false, false
	var walk func(n *html.Node, script bool)
	walk = func(n *html.Node, script bool) {
		switch n.Type {
		case html.TextNode:
			if strings.Contains(n.Data, token) {
				if script {
					inScript = true
				} else {
					elsewhere = true
				}
			}
		case html.ElementNode:
			for _, a := range n.Attr {
				if strings.Contains(a.Val, token) {
					elsewhere = true
				}
			}
			script = script || n.DataAtom == atom.Script && n.Namespace == ""
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, script)
		}
	}
	walk(root, false)
	return inScript && !elsewhere
}

func checkFuzzOutput(t *testing.T, out string, max int) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("invalid UTF-8 in output %q", out)
	}
	if max > 0 && len(out) > max {
		t.Fatalf("output %d bytes > cap %d", len(out), max)
	}
	for _, r := range out {
		if removed(r) {
			t.Fatalf("output contains removed character %U: %q", r, out)
		}
	}
	low := strings.ToLower(out)
	for _, m := range []string{"<untrusted-content", "</untrusted-content", "<|", "<｜", "[inst]", "[/inst]", "<<sys>>", "!["} {
		if strings.Contains(low, m) {
			t.Fatalf("output contains %q: %q", m, out)
		}
	}
}

// FuzzHTML: HTML never panics or errors on any page, in full and in main
// content mode; its output never holds script content, hidden planted
// text, removed characters or marker look-alikes, and respects MaxOutput.
// The main content is a part of the full output: its letters are a
// subsequence of the full output's.
func FuzzHTML(f *testing.F) {
	addPageSeeds(f, func(s string) { f.Add(s, false, false, false); f.Add(s, false, false, true) })
	f.Add("<p>x</p>", true, true, false)
	f.Add("<article><h1>t</h1><p>"+strings.Repeat("Some words of an article. ", 40)+"<span class=sr-only>HIDTOKEND</span></p></article><nav>a b</nav>", true, false, true)
	base, _ := url.Parse("https://example.org/a/b")
	f.Fuzz(func(t *testing.T, page string, md, full, main bool) {
		if len(page) > 1<<20 {
			return
		}
		doc := "<script>" + scriptToken1 + "</script>" + hiddenPlants + page + "<script>var t='" + scriptToken2 + "'</script>"
		o := Options{BaseURL: base, MaxOutput: 1 << 16}
		if md {
			o.Format = "markdown"
		}
		if full {
			o.Links = "full"
		}
		if main {
			o.Content = "main"
		}
		p, err := HTML(strings.NewReader(doc), o)
		if err != nil {
			t.Fatal(err)
		}
		if main && !full && !p.Truncated {
			o.Content = ""
			all, err := HTML(strings.NewReader(doc), o)
			if err != nil {
				t.Fatal(err)
			}
			if extra := lettersNotIn(p.Text, all.Text); extra != "" {
				t.Fatalf("main content has %q, which the full output lacks in that order:\nmain: %q\nfull: %q", extra, p.Text, all.Text)
			}
		}
		checkFuzzOutput(t, p.Text, o.MaxOutput)
		checkFuzzOutput(t, p.Title, 4*maxTitle)
		for _, l := range p.Links {
			checkFuzzOutput(t, l, maxURLLen)
			if !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") || strings.ContainsAny(l, "?# ()<>") {
				t.Fatalf("bad link target %q", l)
			}
		}
		// Hidden elements before the page stay hidden whatever follows.
		for _, tok := range hiddenTokens {
			if !strings.Contains(page, tok) && strings.Contains(strings.ReplaceAll(p.Text+p.Title, `\`, ""), tok) {
				t.Fatalf("hidden content %s in output: %q", tok, p.Text)
			}
		}
		if !strings.Contains(page, scriptToken1) && strings.Contains(p.Text+p.Title, scriptToken1) {
			t.Fatalf("script content in output: %q", p.Text)
		}
		if !strings.Contains(page, scriptToken2) && strings.Contains(p.Text+p.Title, scriptToken2) && scriptOnly(doc, scriptToken2) {
			t.Fatalf("script content in output: %q", p.Text)
		}
	})
}

// FuzzText: Text never panics, cleans and neutralises everything, respects
// the cap and is idempotent.
func FuzzText(f *testing.F) {
	addPageSeeds(f, func(s string) { f.Add(s, 0) })
	f.Add("{\n  \"a\": \"\u200bx\"\r\n}\n\n\n", 10)
	f.Add("<|im_start|>\t\t  x  \n", 3)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<20 {
			max = 0
		}
		out, truncated := Text(s, max)
		checkFuzzOutput(t, out, max)
		if !truncated {
			if again, _ := Text(out, 0); again != out {
				t.Fatalf("Text not idempotent:\n%q\n%q", out, again)
			}
		}
		if c := Clean(s); Clean(c) != c || !utf8.ValidString(c) {
			t.Fatalf("Clean not idempotent or invalid on %q", s)
		}
		if n := neutralize(s); neutralize(n) != n {
			t.Fatalf("neutralize not idempotent on %q", s)
		}
	})
}

// lettersNotIn checks that the letters of a are a subsequence of those
// of b (a is b with parts left out, in the same order; a left-out
// element may join two words) and returns what of a is left over, or "".
func lettersNotIn(a, b string) string {
	letters := func(s string) []rune {
		var out []rune
		for _, r := range s {
			if unicode.IsLetter(r) {
				out = append(out, r)
			}
		}
		return out
	}
	la, lb := letters(a), letters(b)
	j := 0
	for i, r := range la {
		for j < len(lb) && lb[j] != r {
			j++
		}
		if j == len(lb) {
			return string(la[i:min(i+40, len(la))])
		}
		j++
	}
	return ""
}
