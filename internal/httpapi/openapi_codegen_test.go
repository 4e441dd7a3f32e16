package httpapi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"golang.org/x/mod/modfile"

	// The generated client imports it; importing it here keeps it in
	// go.mod and its module in the cache the build below reads.
	_ "github.com/oapi-codegen/runtime"
)

// generatedPackage is the package name of the generated client.
const generatedPackage = "sandboxdclient"

// TestOpenAPIGeneratesAGoClient generates a Go client and its types from
// openapi.yaml with oapi-codegen, as a client of the API would, and builds
// and vets the result in a module of its own: the document must be one a
// generator can turn into code that compiles.
func TestOpenAPIGeneratesAGoClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a generated module (-short)")
	}
	code := generateClient(t)
	for _, want := range []string{"func (c *Client) Exec(", "type ExecRequest struct", "type Capture", "RetentionS *int"} {
		if !strings.Contains(code, want) {
			t.Errorf("the generated client has no %q", want)
		}
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("client.go", code)
	goTool, err := exec.LookPath("go") // go test puts its own first on PATH
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	root := moduleRoot(t)
	write("go.mod", generatedGoMod(t, root))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		// Offline: sandboxd's build list is the module's, so every module
		// comes from the cache sandboxd's own build filled (GOPROXY=off
		// fails rather than fetches).
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the client generated from openapi.yaml failed: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// generatedGoMod is the go.mod of the module of the generated client:
// sandboxd's requirements (so that its build list, oapi-codegen's runtime
// and the YAML package among them, is sandboxd's), no replacements.
func generatedGoMod(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.ParseLax("go.mod", raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Replace) > 0 {
		t.Fatalf("sandboxd's go.mod has replace directives; the generated module would not build as a client's")
	}
	var b strings.Builder
	b.WriteString("module example.test/" + generatedPackage + "\n\ngo " + mf.Go.Version + "\n\nrequire (\n")
	for _, r := range mf.Require {
		b.WriteString("\t" + r.Mod.Path + " " + r.Mod.Version + "\n")
	}
	b.WriteString(")\n")
	return b.String()
}

// generateClient runs oapi-codegen (client and types) on openapi.yaml.
func generateClient(t *testing.T) string {
	t.Helper()
	doc := loadKinDocument(t)
	cfg := codegen.Configuration{PackageName: generatedPackage, Generate: codegen.GenerateOptions{Client: true, Models: true}, OutputOptions: codegen.OutputOptions{ResolveTypeNameCollisions: true}}.UpdateDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	code, err := codegen.Generate(doc, cfg)
	if err != nil {
		t.Fatalf("oapi-codegen cannot generate a client from openapi.yaml: %v", err)
	}
	return code
}

// moduleRoot is the directory of sandboxd's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
