package safetext

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func TestParseColor(t *testing.T) {
	for v, want := range map[string]int32{
		"white": 0xffffff, "ghostwhite": 0xf8f8ff, "rebeccapurple": 0x663399, "canvas": 0xffffff,
		"#abc": 0xaabbcc, "#a1b2c3": 0xa1b2c3, "#abcf": 0xaabbcc, "#0000": colTransparent,
		"rgb(255 0 0)": 0xff0000, "rgb(100%, 0%, 0%)": 0xff0000, "rgba(0,0,0,0)": colTransparent,
		"rgba(0,0,0,.5)": colUnknown, "hsl(0, 100%, 50%)": 0xff0000, "hsl(120deg 100% 25%)": 0x008000,
		"hsl(0.5turn, 100%, 50%)": 0x00ffff, "hsl(-120 100% 50%)": 0x0000ff, "hsl(0 0% 100%)": 0xffffff,
		"hsla(0,0%,100%,0)": colTransparent, "hsl(0 0% 100% / 50%)": colUnknown, "lab(50 0 0)": colUnknown,
		"var(--x)": colUnknown, "#ggg": colUnknown, "transparent": colTransparent, "nocolor": colUnknown,
	} {
		if got := parseColor(v); got != want {
			t.Errorf("parseColor(%q) = %#x, want %#x", v, got, want)
		}
	}
}

func TestBgValue(t *testing.T) {
	for _, c := range []struct {
		v         string
		shorthand bool
		want      int32
	}{
		{"#fff", false, 0xffffff}, {"transparent", false, colInherit}, {"rgba(0,0,0,0)", false, colInherit},
		{"none", true, colInherit}, {"url(x.png) #fff", true, colUnknown}, {"#000 no-repeat", true, 0},
		{"no-repeat center", true, colInherit}, {"rgb(0, 0, 0) fixed", true, 0}, {"currentcolor", true, colCurrent},
		{"linear-gradient(#fff, #000)", true, colUnknown}, {"rgba(0, 0, 0, .5)", true, colUnknown},
		{"var(--bg)", false, colUnknown}, {"top left / cover white", true, 0xffffff},
	} {
		if got := bgValue(c.v, c.shorthand); got != c.want {
			t.Errorf("bgValue(%q, %v) = %d, want %d", c.v, c.shorthand, got, c.want)
		}
	}
}

// visibleCase is a page with one paragraph X, whose text is kept
// (visible) or dropped.
type visibleCase struct {
	name, page string
	visible    bool
}

// checkVisible requires each case's X to be kept or dropped as it says.
func checkVisible(t *testing.T, cases []visibleCase) {
	t.Helper()
	for _, c := range cases {
		p := mustHTML(t, c.page, Options{})
		if got := strings.Contains(p.Text, "X"); got != c.visible {
			t.Errorf("%s: visible = %v, want %v (output %q)", c.name, got, c.visible, p.Text)
		}
	}
}

// TestColorCascade checks which colour declaration wins: each page has
// one paragraph, whose text is kept (visible) or dropped.
func TestColorCascade(t *testing.T) {
	const std = "<!DOCTYPE html>"
	checkVisible(t, []visibleCase{
		{"class white on default white", std + `<style>.w{color:#fff}</style><p class=w>X</p>`, false},
		{"body background from a rule", std + `<style>body{background:#123456}</style><p style="color:#123456">X</p>`, false},
		{"html background from a rule", std + `<style>html{background:#000}</style><p>X</p>`, false},
		{"text colour inherited from body", std + `<style>body{color:#fff}</style><p>X</p>`, false},
		{"rule beats font color", std + `<style>.w{color:#fff}</style><font class=w color=black>X</font>`, false},
		{"inline beats rule", std + `<style>.w{color:#fff}</style><p class=w style="color:#000">X</p>`, true},
		{"important rule beats inline", std + `<style>.w{color:#fff!important}</style><p class=w style="color:#000">X</p>`, false},
		{"important inline beats important rule", std + `<style>.w{color:#000!important}</style><p class=w style="color:#fff !important">X</p>`, false},
		{"higher specificity wins", std + `<style>p.w{color:#000}.w{color:#fff}</style><p class=w>X</p>`, true},
		{"id beats classes", std + `<style>#a{color:#fff}.w.v.u{color:#000}</style><p id=a class="w v u">X</p>`, false},
		{"later wins at equal specificity", std + `<style>.v{color:#000}.w{color:#fff}</style><p class="w v">X</p>`, false},
		{"unlayered beats layered", std + `<style>.w{color:#fff}@layer a{.w{color:#000}}</style><p class=w>X</p>`, false},
		{"important layered beats important unlayered", std + `<style>@layer a{.w{color:#fff!important}}.w{color:#000!important}</style><p class=w>X</p>`, false},
		{"conditional rule can hide", std + `<style>@media (min-width:1px){.w{color:#fff}}</style><p class=w>X</p>`, false},
		{"conditional rule cannot show", std + `<style>.w{color:#fff}@supports (x:y){.w{color:#000}}</style><p class=w>X</p>`, false},
		{"print-only rule ignored", std + `<style>@media print{.w{color:#fff}}</style><p class=w>X</p>`, true},
		{"media attribute is a condition", std + `<style>.w{color:#fff}</style><style media="(max-width:1px)">.w{color:#000}</style><p class=w>X</p>`, false},
		{"where cannot show", std + `<style>p.w{color:#fff}:where(#z) p.w{color:#000}</style><div id=z><p class=w>X</p></div>`, false},
		{"is counts its argument", std + `<style>:is(#z) .w{color:#fff}div .w.v{color:#000}</style><div id=z><p class="w v">X</p></div>`, false},
		{"descendant selector exact", std + `<style>.dark .t{color:#fff}</style><div><p class=t>X</p></div>`, true},
		{"nth-child exact", std + `<style>.w{color:#fff}.w:nth-child(9){color:#000}</style><div><p class=w>X</p></div>`, false},
		{"hover never applies", std + `<style>.w:hover{color:#fff}</style><p class=w>X</p>`, true},
		{"not hover applies", std + `<style>.w:not(:hover){color:#fff}</style><p class=w>X</p>`, false},
		{"nested rule", std + `<style>.a{ .b &{color:#fff} }</style><div class=b><p class=a>X</p></div>`, false},
		{"nested rule elsewhere", std + `<style>.a{ .b &{color:#fff} }</style><div><p class=a>X</p></div>`, true},
		{"background image", std + `<style>.h{background:url(x.jpg);color:#fff}</style><p class=h>X</p>`, true},
		{"background currentcolor", std + `<style>.c{background:currentcolor}</style><p class=c>X</p>`, false},
		{"background none shows the parent", std + `<style>body{background:#000}.n{background:none;color:#000}</style><p class=n>X</p>`, false},
		{"colour from a variable", std + `<style>.w{color:#fff}.v{color:var(--c)}</style><p class="w v">X</p>`, true},
		{"external sheet: background unknown", std + `<link rel=stylesheet href="/site.css"><style>.w{color:#fff}</style><p class=w>X</p>`, true},
		{"external import: background unknown", std + `<style>@import "/site.css";.w{color:#fff}</style><p class=w>X</p>`, true},
		{"data sheet is not external", std + `<link rel=stylesheet href="data:text/css,"><style>.w{color:#fff}</style><p class=w>X</p>`, false},
		{"data sheet colour", std + `<link rel=stylesheet href="data:text/css,.w%7Bcolor:white%7D"><p class=w>X</p>`, false},
		{"standards: class case matters", std + `<style>.W{color:#fff}</style><p class=w>X</p>`, true},
		{"quirks: class case does not", `<style>.W{color:#fff}</style><p class=w>X</p>`, false},
		{"quirks: id case does not", `<style>#A{color:#fff}</style><p id=a>X</p>`, false},
		{"body text attribute", std + `<body text=white><p>X</p>`, false},
		{"dark canvas, default text", std + `<style>body{background:#050505}</style><p>X</p>`, false},
		{"dark canvas, light text", std + `<style>body{background:#050505;color:#eee}</style><p>X</p>`, true},
		{"transparent inline text stays hidden", std + `<style>p{color:#000!important}</style><p style="color:transparent">X</p>`, false},
	})
}

func TestDataURL(t *testing.T) {
	for u, want := range map[string]string{
		"data:text/css,.a%7Bx:y%7D":         ".a{x:y}",
		" DATA:,a b ":                       "a b",
		"data:text/css;base64,LmF7eDp5fQ==": ".a{x:y}",
		"data:text/css;base64,LmF7 eDp5fQ":  ".a{x:y}",
		"data:text/css,.a{}#frag":           ".a{}",
		"data:text/css,100%":                "100%",
		"data:;base64,%4C%6D%46%37eDp5fQ==": ".a{x:y}",
	} {
		if got, ok := dataURL(u); !ok || got != want {
			t.Errorf("dataURL(%q) = %q, %v; want %q", u, got, ok, want)
		}
	}
	for _, u := range []string{"https://x/a.css", "data:text/css", "data:text/css;base64,@@@", "/a.css", ""} {
		if got, ok := dataURL(u); ok {
			t.Errorf("dataURL(%q) = %q, want not ok", u, got)
		}
	}
}

func TestSelectorRewrites(t *testing.T) {
	for in, want := range map[string]string{
		":is(.a, .b) p":            ":not(:not(.a, .b)) p",
		"p:WHERE(.a:is(.b))":       "p:not(:not(.a:not(:not(.b))))",
		"a:not(.x):-webkit-any(b)": "a:not(.x):not(:not(b))",
		`[title=":is("] .c`:        `[title=":is("] .c`,
	} {
		if got := rewriteIs(in); got != want {
			t.Errorf("rewriteIs(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range [][3]string{
		{"& .b", ".a", ":is(.a) .b"}, {".b", ".a, .c", ":is(.a, .c) .b"}, {"&:hover", ".a", ":is(.a):hover"},
		{".x &", ".a", ".x :is(.a)"}, {`[data-x="&"]`, ".a", `:is(.a) [data-x="&"]`},
	} {
		if got := nestSelector(c[0], c[1]); got != c[2] {
			t.Errorf("nestSelector(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
	if got := nestedList(".b, &.c", ".a"); got != ":is(.a) .b, :is(.a).c" {
		t.Errorf("nestedList: %q", got)
	}
	if got := foldNames(`DIV.Ab#Cd[data-X="Ef"] .G`); got != `DIV.ab#cd[data-X="Ef"] .g` {
		t.Errorf("foldNames: %q", got)
	}
}

func TestQuirks(t *testing.T) {
	for page, want := range map[string]bool{
		"<p>x":                true,
		"<!DOCTYPE html><p>x": false,
		"<!doctype HTML><p>x": false,
		"<!DOCTYPE svg><p>x":  true,
		`<!DOCTYPE html PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN"><p>x`:                                               true,
		`<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd"><p>x`: false,
	} {
		doc, err := html.Parse(strings.NewReader(page))
		if err != nil {
			t.Fatal(err)
		}
		if got := quirks(doc); got != want {
			t.Errorf("quirks(%q) = %v, want %v", page, got, want)
		}
	}
}

func TestClosedDetailsSelected(t *testing.T) {
	page := `<details><summary><b class=s>SUMMARY</b></summary><p class=s>BODY</p></details><p class=s>AFTER</p>`
	p := mustHTML(t, page, Options{Selector: ".s"})
	if !strings.Contains(p.Text, "SUMMARY") || strings.Contains(p.Text, "BODY") || !strings.Contains(p.Text, "AFTER") {
		t.Fatalf("selected in a closed details: %q", p.Text)
	}
	p = mustHTML(t, strings.Replace(page, "<details>", "<details open>", 1), Options{Selector: ".s"})
	if !strings.Contains(p.Text, "BODY") {
		t.Fatalf("selected in an open details: %q", p.Text)
	}
}

func TestImportRules(t *testing.T) {
	const std = "<!DOCTYPE html>"
	checkVisible(t, []visibleCase{
		{"import", std + `<style>@import url("data:text/css,.a{display:none}");</style><p class=a>X</p>`, false},
		{"import in a named layer loses", std + `<style>.a{color:#fff}</style><style>@import url("data:text/css,.a{color:black}") layer(x) screen;</style><p class=a>X</p>`, false},
		{"import in a layer loses", std + `<style>.a{color:#fff}</style><style>@import "data:text/css,.a{color:black}" layer;</style><p class=a>X</p>`, false},
		{"print-only import", std + `<style>@import "data:text/css,.a{display:none}" print;</style><p class=a>X</p>`, true},
		{"import after a rule", std + `<style>p{margin:0}@import "data:text/css,.a{display:none}";</style><p class=a>X</p>`, true},
		{"import after charset and layer", std + `<style>@charset "utf-8";@layer x;@import "data:text/css,.a{display:none}";</style><p class=a>X</p>`, false},
		{"nested imports", std + `<style>@import "data:text/css,@import 'data:text/css,.a{display:none}';";</style><p class=a>X</p>`, false},
	})
}

func TestSelectorShape(t *testing.T) {
	for sel, want := range map[string][3]int{
		"p": {0, 0, 0}, ".a .b": {1, 0, 0}, ".a > .b": {0, 0, 0}, ".a  >  .b .c": {1, 0, 0}, ".a ~ .b + .c": {0, 1, 0},
		":not(:not(.a .b, .c)) p": {2, 0, 0}, ":is(.a .b, .c .d, .e .f) .x": {2, 0, 0},
		".a :not(.b ~ .c) ~ .d": {1, 2, 0}, "p:not(.a .b .c)": {2, 0, 0}, "a ( b": {1, 0, 0}, `[title="a b ~ c"] p`: {1, 0, 0}, "tr:nth-child(2n) td": {1, 0, 1},
		"li:last-child": {0, 0, 1}, "a, b": {0, 0, 0},
	} {
		sh := selectorShape(sel)
		nth := 0
		if sh.nth {
			nth = 1
		}
		if got := [3]int{int(sh.desc), int(sh.sibs), nth}; got != want {
			t.Errorf("selectorShape(%q) = %v, want %v", sel, got, want)
		}
	}
}

// TestColorMatchingBounded: selectors whose exact matching would take
// depth^n or siblings^n steps on a hostile page are matched by their key
// compound instead (as uncertain rules: they can hide, not show), so the
// page renders quickly.
func TestColorMatchingBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><style>.z * * * * * p{color:#fff} .y ~ * ~ * ~ * ~ b{color:#fff}</style>`)
	b.WriteString(strings.Repeat("<div>", 400))
	b.WriteString(strings.Repeat("<p>DEEP</p>", 2000))
	b.WriteString(strings.Repeat("</div>", 400))
	b.WriteString("<section>" + strings.Repeat("<i>w</i>", 5000) + strings.Repeat("<b>WIDE</b>", 200) + "</section><p>END</p>")
	start := time.Now()
	p := mustHTML(t, b.String(), Options{})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if strings.Contains(p.Text, "DEEP") || strings.Contains(p.Text, "WIDE") || !strings.Contains(p.Text, "END") {
		t.Errorf("over the budget, rules must still hide by their key compound: %.200q", p.Text)
	}
	// Within the budget the same shapes are matched exactly.
	p = mustHTML(t, `<!DOCTYPE html><style>.z * * p{color:#fff}</style><div><div><div><p>SHALLOW</p></div></div></div>`, Options{})
	if !strings.Contains(p.Text, "SHALLOW") {
		t.Errorf("exact match lost: %q", p.Text)
	}
}

func TestColorBudget(t *testing.T) {
	n := &html.Node{Type: html.ElementNode}
	var b colorBudget
	r := &shape{desc: 2}
	if !b.afford(r, &elemInfo{n: n, depth: 300}) || b.spent != 90000 {
		t.Fatalf("depth 300, 2 combinators: spent %d", b.spent)
	}
	if b.afford(&shape{desc: 3}, &elemInfo{n: n, depth: 300}) {
		t.Fatal("afforded 300^3 steps for one match")
	}
	b.spent = maxColorWork - 10
	if b.afford(&shape{desc: 1}, &elemInfo{n: n, depth: 20}) || !b.afford(&shape{}, &elemInfo{n: n, depth: 20}) {
		t.Fatal("the page's budget is not kept")
	}
	if (*colorBudget)(nil).afford(&shape{}, &elemInfo{n: n}) {
		t.Fatal("no budget, exact match")
	}
}

// TestNestingBounded: resolving CSS nesting copies the parent list into
// each nested selector; with comma lists at every level that would grow
// exponentially, so past a size nesting is left unresolved (and such
// rules only hide).
func TestNestingBounded(t *testing.T) {
	var css strings.Builder
	for i := range maxCSSNest {
		for j := range 8 {
			if j > 0 {
				css.WriteString(", ")
			}
			fmt.Fprintf(&css, ".n%d-%d &", i, j)
		}
		css.WriteString(" { color: #fff; ")
	}
	css.WriteString(strings.Repeat("}", maxCSSNest))
	page := "<!DOCTYPE html><style>.top{ " + css.String() + " }</style><div class=n15-3><p class=top>DEEPNEST</p></div><p>END</p>"
	start := time.Now()
	p := mustHTML(t, page, Options{})
	if d := time.Since(start); d > 5*time.Second || !strings.Contains(p.Text, "END") {
		t.Fatalf("took %v: %q", d, p.Text)
	}
	if strings.Contains(p.Text, "DEEPNEST") {
		t.Errorf("an unresolved nested rule must still hide: %q", p.Text)
	}
}
