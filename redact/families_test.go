package redact

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// familyCase is a line of testdata/families.txt, expanded.
type familyCase struct {
	line     int
	positive bool
	pieces   []string // text outside the secrets, len(secrets)+1
	secrets  []string
}

func (c familyCase) text() string {
	var b strings.Builder
	for i, p := range c.pieces {
		b.WriteString(p)
		if i < len(c.secrets) {
			b.WriteString(c.secrets[i])
		}
	}
	return b.String()
}

var genRE = regexp.MustCompile(`\{(alnum|hex|HEX|upper|lower|digits|b64|urlb64|ulnum|sp)(?::(\d+))?\}`)

// expand replaces the generators of testdata/families.txt with random text.
func expand(s string) string {
	s = strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(s)
	return genRE.ReplaceAllStringFunc(s, func(g string) string {
		m := genRE.FindStringSubmatch(g)
		n, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "alnum":
			return rnd(alnum, n)
		case "hex":
			return rnd(hexd, n)
		case "HEX":
			return strings.ToUpper(rnd(hexd, n))
		case "upper":
			return rnd(upper, n)
		case "lower":
			return rnd("abcdefghijklmnopqrstuvwxyz", n)
		case "digits":
			return rnd(digits, n)
		case "b64":
			return rnd(b64, n)
		case "urlb64":
			return rnd(urlb64, n)
		case "ulnum":
			return rnd(upper+digits, n)
		}
		return " "
	})
}

func loadFamilies(t testing.TB) []familyCase {
	f, err := os.Open("testdata/families.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []familyCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if len(l) < 2 || (l[0] != '+' && l[0] != '-') || l[1] != ' ' {
			continue
		}
		c := familyCase{line: n, positive: l[0] == '+'}
		rest := l[2:]
		for {
			i := strings.Index(rest, "«")
			if i < 0 {
				break
			}
			j := strings.Index(rest[i:], "»")
			if j < 0 {
				t.Fatalf("line %d: « without »", n)
			}
			c.pieces = append(c.pieces, expand(rest[:i]))
			c.secrets = append(c.secrets, expand(rest[i+len("«"):i+j]))
			rest = rest[i+j+len("»"):]
		}
		c.pieces = append(c.pieces, expand(rest))
		if c.positive != (len(c.secrets) > 0) {
			t.Fatalf("line %d: a positive needs «secrets», a negative none", n)
		}
		out = append(out, c)
	}
	return out
}

// TestFamilies: each secret of testdata/families.txt is replaced whole and
// nothing around it changes; each look-alike survives.
func TestFamilies(t *testing.T) {
	r := Default()
	cases := loadFamilies(t)
	if len(cases) < 50 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		in := c.text()
		got, counts := r.String(in)
		if !c.positive {
			if got != in {
				t.Errorf("line %d: look-alike changed:\n in: %q\ngot: %q", c.line, in, got)
			}
			continue
		}
		var want strings.Builder
		want.WriteString("^")
		for i, p := range c.pieces {
			want.WriteString(regexp.QuoteMeta(p))
			if i < len(c.secrets) {
				want.WriteString(`\[REDACTED:[a-z0-9_]+\]`)
			}
		}
		want.WriteString("$")
		if !regexp.MustCompile(want.String()).MatchString(got) || counts.Total() != len(c.secrets) {
			t.Errorf("line %d: secret not replaced exactly (%v):\n in: %q\ngot: %q", c.line, counts, in, got)
		}
		checkSplits(t, r, in)
	}
}

// The assignment syntaxes of the fuzz target: %s is the name, %v the value.
var assignForms = []string{
	`%s = "%v"`, `%s := "%v"`, `%s ::= "%v"`, `%s ?= '%v'`, `$%s .= "%v"`, `%s: %v`, `"%s": "%v"`,
	`var %s string = "%v"`, `%s = ` + "`%v`", `<%s>%v</%s>`, `--%s %v`, `--%s=%v`,
	`System.setProperty("%s", "%v")`, `%s=%v`, `export %s="%v"`,
}

var assignNames = []string{"api_token", "DB_PASSWORD", "clientSecret", "some_api_token_123", "creds", "mySecretString", "X-Api-Key", "auth_token"}

// FuzzAssignment: the assignment parser never panics and the Writer agrees
// with String on any text; a token-like value assigned to a secret's name
// in any of the syntaxes, inside any text, is redacted whole.
func FuzzAssignment(f *testing.F) {
	for i, c := range loadFamilies(f) {
		f.Add([]byte(c.text()), uint8(i), []byte(rnd(alnum, 32)), uint16(i*7))
	}
	f.Add([]byte(`"PWD="+cmd.Dir, token ::= "`), uint8(3), []byte("x"), uint16(5))
	f.Add([]byte("<token>\n\n</token> pass --password"), uint8(9), []byte("Zf3D0LXCM3EIMbgJpUNnkRtOfOueHznB"), uint16(1))
	r := Default()
	f.Fuzz(func(t *testing.T, data []byte, form uint8, value []byte, at uint16) {
		out, _ := r.Bytes(data)
		i := int(at) % (len(data) + 1)
		if got, _ := streamRedact(r, string(data[:i]), string(data[i:])); got != string(out) {
			t.Fatalf("split at %d:\n%s", i, firstDiff(got, string(out)))
		}
		// A planted assignment: the value made token-like (letters and
		// digits) from the fuzz bytes.
		var v []byte
		for _, b := range value {
			if isWord(b) && b != '_' {
				v = append(v, b)
			}
		}
		if len(v) < 24 || !hasDigit(v) || !hasLetter(v) || bytes.ToLower(v)[0] == bytes.ToUpper(v)[0] || entropy(v) < 4 ||
			isPlaceholder(v) || sequential(v) || placeholderToken(v) {
			return
		}
		name := assignNames[int(form)%len(assignNames)]
		line := strings.ReplaceAll(fmt.Sprintf(assignForms[int(form/8)%len(assignForms)], name, string(v)), "%!s(MISSING)", name)
		planted := string(data[:i]) + "\n" + line + "\n" + string(data[i:])
		red, _ := r.String(planted)
		if strings.Count(red, string(v)) > strings.Count(string(data), string(v)) {
			t.Fatalf("planted value survives:\n%q\n->\n%q", line, red)
		}
	})
}
