package safetext

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestCorpusEval measures the corpus against the goals of the main
// content and of hiding:
//
//	go test ./browse/safetext/ -run TestCorpusEval -v
//
// On the pages that mark their main content (data-gold on its blocks;
// the gold text is the page rendered with the selector [data-gold], so
// hidden text in it does not count) it reports the share of the main
// text's words that full mode keeps, and for main mode the share of the
// returned words that are main content (precision) and the share of the
// main content returned (recall), as bags of lower-cased words. On every
// page it counts the planted hidden tokens (HIDDEN_...) and how many got
// through in each mode: none may.
func TestCorpusEval(t *testing.T) {
	files, err := filepath.Glob("testdata/pages/*.html")
	if err != nil {
		t.Fatal(err)
	}
	planted := regexp.MustCompile(`HIDDEN_[A-Z0-9_]+`)
	var fullKept, gold, mainReturned, mainGood, plants, leaksFull, leaksMain int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		name := strings.TrimSuffix(filepath.Base(f), ".html")
		opts := pageOptions(t, src)
		opts.Content = ""
		full := mustHTML(t, src, opts)
		opts.Content = "main"
		if opts.Selector != "" {
			opts.Selector = ""
		}
		main := mustHTML(t, src, opts)
		tokens := map[string]bool{}
		for _, m := range planted.FindAllString(src, -1) {
			tokens[m] = true
		}
		for tok := range tokens {
			plants++
			if strings.Contains(full.Text+full.Title, tok) {
				leaksFull++
				t.Errorf("%s: %s in full mode", name, tok)
			}
			if strings.Contains(main.Text+main.Title, tok) {
				leaksMain++
				t.Errorf("%s: %s in main mode", name, tok)
			}
		}
		if !strings.Contains(src, "data-gold") {
			continue
		}
		g := mustHTML(t, src, Options{Selector: "[data-gold]"})
		gw, fw, mw := wordBag(g.Text), wordBag(full.Text), wordBag(main.Text)
		gn, fk, mn, mk := size(gw), overlap(gw, fw), size(mw), overlap(gw, mw)
		t.Logf("%-22s gold %4d words | full keeps %.3f | main %4d words (%s): precision %.3f recall %.3f, %d left out",
			name, gn, ratio(fk, gn), mn, main.Content, ratio(mk, mn), ratio(mk, gn), main.OmittedWords)
		gold += gn
		fullKept += fk
		mainReturned += mn
		mainGood += mk
	}
	t.Logf("all: full mode keeps %.3f of the main text's words (goal >= 0.985); main mode: %.3f of returned words are main content (goal >= 0.93), %.3f of the main content kept (goal >= 0.95)",
		ratio(fullKept, gold), ratio(mainGood, mainReturned), ratio(mainGood, gold))
	t.Logf("hidden injections through: full %d of %d, main %d of %d (goal 0)", leaksFull, plants, leaksMain, plants)
	if gold == 0 || plants == 0 {
		t.Fatal("the corpus has no main-content pages or no planted tokens")
	}
	// The goals hold on this corpus; a change that breaks them is seen.
	if r := ratio(fullKept, gold); r < 0.985 {
		t.Errorf("full mode keeps %.3f of the main text", r)
	}
	if p, r := ratio(mainGood, mainReturned), ratio(mainGood, gold); p < 0.93 || r < 0.95 {
		t.Errorf("main mode: precision %.3f, recall %.3f", p, r)
	}
}

func wordBag(s string) map[string]int {
	bag := map[string]int{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		bag[w]++
	}
	return bag
}

func size(bag map[string]int) int {
	n := 0
	for _, c := range bag {
		n += c
	}
	return n
}

func overlap(a, b map[string]int) int {
	n := 0
	for w, c := range a {
		n += min(c, b[w])
	}
	return n
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
