package httpapi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

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
	mod := "module example.test/" + generatedPackage + "\n\ngo 1.26\n"
	for _, m := range generatedDeps {
		mod += "\nrequire " + m + " " + moduleVersion(t, goTool, m)
	}
	write("go.mod", mod+"\n")
	sum, err := os.ReadFile(filepath.Join(moduleRoot(t), "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		// Offline: every module comes from the cache this test's own build
		// filled (GOPROXY=off fails rather than fetches).
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the client generated from openapi.yaml failed: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// generatedDeps are the modules the generated code imports: oapi-codegen's
// runtime, and the YAML package for the application/yaml answer of GET
// /openapi.yaml. Each is required at the version sandboxd builds with.
var generatedDeps = []string{"github.com/oapi-codegen/runtime", "go.yaml.in/yaml/v3"}

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

// moduleVersion is the version of a module in sandboxd's build list.
func moduleVersion(t *testing.T, goTool, path string) string {
	t.Helper()
	cmd := exec.Command(goTool, "list", "-m", "-f", "{{.Version}}", path)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
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
