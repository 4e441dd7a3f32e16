package profiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDatasets(t *testing.T) {
	data := t.TempDir()
	cases := []struct {
		file, body, want string
	}{
		{"sales.yaml", "name: sales\npath: " + data + "\ntenants: [acme]\n", ""},
		{"sales.yaml", "name: other\npath: " + data + "\ntenants: [acme]\n", "does not match the file name"},
		{"sales.yaml", "name: sales\npath: relative/dir\ntenants: [acme]\n", "absolute"},
		{"sales.yaml", "name: sales\npath: /etc/ssl\ntenants: [acme]\n", "system directory /etc"},
		{"sales.yaml", "name: sales\npath: /\ntenants: [acme]\n", "system directory /"},
		{"sales.yaml", "name: sales\npath: " + data + "/missing\ntenants: [acme]\n", "not an existing directory"},
		{"sales.yaml", "name: sales\npath: " + data + "\n", "tenants is required"},
		{"sales.yaml", "name: sales\npath: " + data + "\ntenants: [\"a b\"]\n", "not a tenant name"},
		{"sales.yaml", "name: sales\npath: " + data + "\ntenants: [acme]\nmount: rw\n", "mount"},
		{"sales.yml", "name: sales\npath: " + data + "\ntenants: [acme]\n", "must end in .yaml"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		for _, f := range []string{"exec/default.yaml", "seccomp/default.json"} {
			b, err := os.ReadFile(filepath.Join("..", "profiles", f))
			if err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
			os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		os.MkdirAll(filepath.Join(dir, "datasets"), 0o755)
		os.WriteFile(filepath.Join(dir, "datasets", c.file), []byte(c.body), 0o644)
		set, err := Load(dir)
		if c.want == "" {
			if err != nil || set.Datasets["sales"] == nil || !set.Datasets["sales"].Allows("acme") || set.Datasets["sales"].Allows("other") {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "sales.yaml") {
			t.Errorf("%q: error %v, want one naming the file and %q", c.body, err, c.want)
		}
	}
}
