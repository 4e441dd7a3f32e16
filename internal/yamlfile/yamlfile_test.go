package yamlfile

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestErrorFormat(t *testing.T) {
	if got := (&Error{File: "a.yaml", Line: 3, Msg: "bad"}).Error(); got != "a.yaml:3: bad" {
		t.Fatal(got)
	}
	if got := (&Error{File: "a.yaml", Msg: "bad"}).Error(); got != "a.yaml: bad" {
		t.Fatal(got)
	}
}

func TestDescribeAndKind(t *testing.T) {
	cases := []struct{ src, describe, kind string }{
		{`x: "s3cret"`, `the string "s3cret"`, "a string"},
		{`x: 12`, "the number 12", "a number"},
		{`x: true`, "the boolean true", "a boolean"},
		{`x: ~`, "no value", "no value"},
		{`x: [1]`, "a list", "a list"},
		{`x: {a: 1}`, "a mapping", "a mapping"},
	}
	for _, tc := range cases {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
			t.Fatal(err)
		}
		v := doc.Content[0].Content[1]
		if got := Describe(v); got != tc.describe {
			t.Errorf("Describe(%s) = %q, want %q", tc.src, got, tc.describe)
		}
		if got := Kind(v); got != tc.kind {
			t.Errorf("Kind(%s) = %q, want %q", tc.src, got, tc.kind)
		}
	}
}
