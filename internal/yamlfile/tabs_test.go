package yamlfile

import (
	"errors"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestTabErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want [][2]int // line, column of each tab
	}{
		{"no tabs", "a: 1\nb:\n  c: 2\n", nil},
		{"tab indent", "a:\n\tb: 1\n", [][2]int{{2, 1}}},
		{"spaces then tab", "a:\n  \tb: 1\n", [][2]int{{2, 3}}},
		{"tab after list marker", "a:\n  - \tb\n", [][2]int{{2, 5}}},
		{"every line", "a:\n\tb: 1\nc:\n\td: 2\n", [][2]int{{2, 1}, {4, 1}}},
		{"tab as separator", "a:\t1\nb: [x,\ty]\n", nil},
		{"tab inside block scalar content", "a: |\n  x\n  \ty\nb:\n\tc: 1\n", [][2]int{{5, 1}}},
		{"tab where block scalar is indented", "a: >-\n\tx\n", [][2]int{{2, 1}}},
		{"block scalar in a list", "- |\n  \tkept\n-\tb\n", [][2]int{{3, 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]int
			for _, e := range tabErrors("f.yaml", []byte(tc.src)) {
				if e.File != "f.yaml" || e.Msg != tabMessage {
					t.Errorf("error %v", e)
				}
				got = append(got, [2]int{e.Line, e.Column})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tabs at %v, want %v", got, tc.want)
			}
		})
	}
}

// SyntaxError names a tab that the parser reports in its own words (and
// at times on another line), and passes other problems on with their line.
func TestSyntaxError(t *testing.T) {
	cases := []struct {
		src  string
		want string
	}{
		{"a: 1\nb:\n  c: 1\n\td: 2\n", "f.yaml:4:1: " + tabMessage},
		{"name: x\nlimits:\n\tcpus: 1\n", "f.yaml:3:1: " + tabMessage},
		{"a: |\n\tx\n", "f.yaml:2:1: " + tabMessage},
		{"name: x\n  bad: [\n", "f.yaml:2: invalid YAML: mapping values are not allowed in this context"},
	}
	for _, tc := range cases {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(tc.src), &n)
		if err == nil {
			t.Fatalf("%q parses", tc.src)
		}
		got := SyntaxError("f.yaml", []byte(tc.src), err)
		if got.Error() != tc.want {
			t.Errorf("SyntaxError(%q) = %q, want %q", tc.src, got.Error(), tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"name", "mode", "allow", "deny", "allow_cidrs", "max_response_bytes", "max_request_bytes", "connect_timeout", "ports", "image"}
	for word, want := range map[string]string{
		"alow_cidrs":        "allow_cidrs",
		"allow_cidr":        "allow_cidrs",
		"port":              "ports",
		"imgae":             "image",
		"Name":              "name",
		"conect_timeout":    "connect_timeout",
		"max_respons_bytes": "max_response_bytes",
		"max_re_bytes":      "", // as far from both caps
		"x":                 "", // too short to guess
		"nmae":              "", // name and image are both two edits away
		"nme":               "name",
		"mdoe":              "mode",
		"nm":                "",
		"timeout":           "",
	} {
		if got := Suggest(word, keys); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", word, got, want)
		}
	}
}

func TestErrorsList(t *testing.T) {
	es := Errors{{File: "a.yaml", Line: 2, Column: 3, Msg: "one"}, {File: "b.yaml", Msg: "two"}}
	if got := es.Error(); got != "a.yaml:2:3: one\nb.yaml: two" {
		t.Errorf("Error() = %q", got)
	}
	var first *Error
	if !errors.As(error(es), &first) || first.Msg != "one" {
		t.Errorf("errors.As = %v", first)
	}
	w := Warning{File: "a.yaml", Line: 4, Column: 5, Msg: "look"}
	if got := w.String(); got != "a.yaml:4:5: warning: look" {
		t.Errorf("Warning.String() = %q", got)
	}
}
