package tests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/imagebuild"
)

// dataImage is the data profile's image, which make test builds.
const dataImage = "sandboxd/python-data:3.11"

// A profile whose image is not there yet (make run builds it in the
// background) answers 503 UNAVAILABLE naming the image and how far its
// build is, while the service stays ready for the others; when the image
// appears the profile serves without a restart, and when it is deleted
// while sandboxd runs it answers 503 again.
func TestProfileWaitsForItsImage(t *testing.T) {
	ctx := context.Background()
	tag := "sandboxd-test/absent-" + e2e.RandHex(6) + ":1"
	t.Cleanup(func() {
		_, _ = dockerCli.ImageRemove(context.Background(), tag, image.RemoveOptions{})
	})

	// The shipped profiles, one container per run, the data profile on an
	// image that does not exist.
	profilesDir := filepath.Join(t.TempDir(), "profiles")
	if err := e2e.ContainerProfiles(filepath.Join(moduleRoot, "profiles"), profilesDir); err != nil {
		t.Fatal(err)
	}
	dataProfile := filepath.Join(profilesDir, "exec", "data.yaml")
	b, err := os.ReadFile(dataProfile)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^image: .*$`).ReplaceAll(b, []byte("image: "+tag))
	if err := os.WriteFile(dataProfile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Its build, as images/status.sh reports one.
	dataDir := filepath.Join(t.TempDir(), "data")
	builds := filepath.Join(dataDir, "image-builds")
	if err := os.MkdirAll(builds, 0o755); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(imagebuild.Status{Image: tag, State: imagebuild.Building, Step: "installing Debian packages into a root file system",
		StepNumber: 1, Steps: 3, Started: time.Now().Add(-time.Minute), Updated: time.Now(), Log: filepath.Join(builds, "x.log")})
	if err := os.WriteFile(filepath.Join(builds, imagebuild.FileName(tag)), status, 0o644); err != nil {
		t.Fatal(err)
	}

	keys := filepath.Join(t.TempDir(), "keys.yaml")
	key := newKey()
	if err := e2e.WriteKeys(keys, e2e.Key{ID: "own", Tenant: "own", Roles: []string{"agent"}, Secret: key}); err != nil {
		t.Fatal(err)
	}
	srv, err := e2e.Start(e2e.ServerConfig{Bin: sandboxdBin, DataDir: dataDir, ProfilesDir: profilesDir, KeysFile: keys})
	if err != nil {
		t.Fatalf("own sandboxd did not come up: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(30 * time.Second); err != nil {
			t.Errorf("own sandboxd: %v", err)
		}
	})
	cl := e2e.Client{URL: srv.URL, Key: key}

	// Ready, with the data profile unavailable and why.
	_, rd, err := cl.Readiness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Status != "ready" || !strings.Contains(strings.Join(rd.Unavailable, ","), "data") {
		t.Fatalf("readyz %+v, want ready with data unavailable", rd)
	}
	if c := rd.Check("image " + tag); c == nil || c.OK || !c.Optional || !strings.Contains(c.Error, "step 1 of 3") {
		t.Fatalf("check of the missing image = %+v", c)
	}

	dataExec := func() *e2e.Result {
		req := e2e.Py("print('data')")
		req.Profile = "data"
		res, err := cl.Exec(ctx, req, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := dataExec()
	msg := wantError(t, res, 503, "UNAVAILABLE", "")
	for _, want := range []string{tag, "being built: step 1 of 3 (installing Debian packages", "503 until it is ready"} {
		if !strings.Contains(msg, want) {
			t.Errorf("503 message %q lacks %q", msg, want)
		}
	}
	if _, _, err := cl.ExecOK(ctx, e2e.Py("print('default')"), "", "default\n"); err != nil {
		t.Fatalf("the default profile while the data image is missing: %v", err)
	}

	// The build finishes: the image appears, the profile serves.
	if err := dockerCli.ImageTag(ctx, dataImage, tag); err != nil {
		t.Fatal(err)
	}
	waitLog(t, srv, "image available", 20*time.Second)
	if res := dataExec(); res.Status != 200 {
		t.Fatalf("after the image appeared: %s", res)
	}

	// Deleted while sandboxd runs: 503 again, within the image cache's
	// life, and the log says so.
	if _, err := dockerCli.ImageRemove(ctx, tag, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, srv, "image missing: its profiles answer 503", 20*time.Second)
	deadline := time.Now().Add(90 * time.Second)
	for {
		res := dataExec()
		if res.Status == 503 {
			wantError(t, res, 503, "UNAVAILABLE", "")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a deleted image still serves after 90 s: %s", res)
		}
		time.Sleep(2 * time.Second)
	}
}

func waitLog(t *testing.T, srv *e2e.Server, what string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(srv.Log.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd did not log %q within %v:\n%s", what, timeout, srv.Log.Tail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// make help lists every target of the Makefile with a line of its own.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(moduleRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	phony := regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindSubmatch(mk)
	if phony == nil {
		t.Fatal("the Makefile has no .PHONY line")
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", moduleRoot, "help")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "make" {
			listed[f[1]] = true
		}
	}
	targets := strings.Fields(string(phony[1]))
	if len(targets) < 10 {
		t.Fatalf(".PHONY lists only %v", targets)
	}
	for _, target := range targets {
		if !listed[target] {
			t.Errorf("make help does not list %q (add a `## ` comment to its line)", target)
		}
	}
}
