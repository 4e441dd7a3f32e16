package yamlfile

import (
	"errors"
	"os"
	"path/filepath"
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

func TestReadFileNamesTheFileOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := ReadFile(file, "the keys file")
	var e *Error
	if !errors.As(err, &e) || e.File != file {
		t.Fatalf("error %v (%T), want an *Error for %s", err, err, file)
	}
	if want := file + ": cannot read the keys file: no such file or directory"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	good := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(good, []byte("keys: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(good, "the keys file"); err != nil || string(data) != "keys: []\n" {
		t.Errorf("ReadFile of a readable file: %q %v", data, err)
	}
}
