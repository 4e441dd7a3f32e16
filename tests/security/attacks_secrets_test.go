package security

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// The secret the code holds in the secret-leak attacks: a GitHub token
// shape, assembled at run time from pieces (no file holds one).
var (
	leakToken   = "ghp_" + strings.Repeat("aB3dE6gH9jK2", 3)[:36]
	pyLeakToken = `TOK = "ghp_" + ("aB3dE6gH9jK2" * 3)[:36]` + "\n"
)

// noSecret requires that the answer carries the token nowhere: not in its
// text, not base64-encoded at any alignment (returned file contents,
// stdout_base64, figures), and that it counted what it removed.
func noSecret(t *testing.T, x *run) {
	t.Helper()
	body := string(x.res.Body)
	if strings.Contains(body, leakToken) || strings.Contains(body, leakToken[4:20]) {
		t.Errorf("HOLE: the answer carries the secret: %s", e2e.Clip(x.res.Body, 1500))
	}
	for _, enc := range b64Variants(leakToken) {
		if strings.Contains(body, enc) {
			t.Errorf("HOLE: the answer carries the secret base64-encoded: %s", e2e.Clip(x.res.Body, 1500))
		}
	}
	if x.r != nil && x.r.Redactions["github_pat"] == 0 {
		t.Errorf("redactions %v do not count the secret", x.r.Redactions)
	}
}

// pngWithText is Python that writes a 1x1 PNG with a text chunk of kind
// (tEXt, zTXt or iTXt, the last compressed) holding TOK.
const pyPNG = `
import struct, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
def png_with(kind):
    ihdr = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    idat = chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    if kind == b"tEXt":
        txt = chunk(b"tEXt", b"Comment\x00" + TOK.encode())
    elif kind == b"zTXt":
        txt = chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(TOK.encode()))
    else:
        txt = chunk(b"iTXt", b"Comment\x00\x01\x00en\x00\x00" + zlib.compress(TOK.encode()))
    return b"\x89PNG\r\n\x1a\n" + ihdr + txt + idat + chunk(b"IEND", b"")
`

// secretAttacks are code holding a secret that tries every way out of an
// exec's answer (issue 16, item 1). Each runs as an exec under every
// profile and as a session call.
func secretAttacks() []attack {
	return []attack{
		{
			name:   "secret-glued-to-text",
			code:   pyLeakToken + `for p in ["%3D", "x", "_", "7", "token%3d"]: print(p + TOK)` + "\n",
			status: "ok",
			check:  noSecret,
		},
		{
			name:   "secret-binary-stdout",
			code:   pyLeakToken + `sys.stdout.buffer.write(TOK.encode() + b"\xff\xfe\n")` + "\n",
			status: "ok",
			check:  noSecret,
		},
		{
			name: "secret-binary-file",
			code: pyLeakToken + `
open("/sandbox/out/blob.bin", "wb").write(TOK.encode() + b"\xff")
open("/sandbox/out/before.bin", "wb").write(b"\xff\x00" + TOK.encode())
open("/sandbox/out/clean.bin", "wb").write(b"\xff\x00\x01")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				noSecret(t, x)
				x.wantSkipped(t, "blob.bin", "withheld")
				x.wantSkipped(t, "before.bin", "withheld")
				if x.r.File("clean.bin") == nil {
					t.Errorf("a binary file without a secret was not returned")
				}
			},
		},
		{
			name:   "secret-file-name",
			code:   pyLeakToken + `open("/sandbox/out/" + TOK + ".txt", "w").write("ok")` + "\n" + `os.symlink("/etc/hostname", "/sandbox/out/link-" + TOK)` + "\n",
			status: "ok",
			check: func(t *testing.T, x *run) {
				noSecret(t, x)
				if x.r.File("[REDACTED:github_pat].txt") == nil {
					t.Errorf("the file with a secret in its name is not returned under its redacted name: %s", e2e.Clip(x.res.Body, 800))
				}
				x.wantSkipped(t, "link-[REDACTED:github_pat]", "")
			},
		},
		{
			name: "secret-png-text-chunks",
			code: pyLeakToken + pyPNG + `
for k in (b"tEXt", b"zTXt", b"iTXt"):
    open("/sandbox/out/%s.png" % k.decode(), "wb").write(png_with(k))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				noSecret(t, x)
				for _, k := range []string{"tEXt", "zTXt", "iTXt"} {
					x.wantSkipped(t, k+".png", "withheld")
				}
			},
		},
	}
}

// TestSecretsLeaveNoSessionChannel tries the channels only a session has
// (issue 16, item 1): an exception class named after the secret, a
// figure's text chunks, and GET /sessions/{id}/files of a binary file.
func TestSecretsLeaveNoSessionChannel(t *testing.T) {
	var sess struct {
		ID string `json:"id"`
	}
	createSession(t, map[string]any{"profile": "data"}, "secrets-session", &sess)
	defer sessionDo("DELETE", "/sessions/"+sess.ID, nil, "secrets-session")
	call := func(code string) []byte {
		t.Helper()
		return sessionCall(t, sess.ID, code, "secrets-session")
	}
	clean := func(what string, body []byte) {
		t.Helper()
		if strings.Contains(string(body), leakToken) || strings.Contains(string(body), leakToken[4:20]) {
			t.Errorf("HOLE: %s carries the secret: %s", what, e2e.Clip(body, 1500))
		}
		for _, enc := range b64Variants(leakToken) {
			if strings.Contains(string(body), enc) {
				t.Errorf("HOLE: %s carries the secret base64-encoded", what)
			}
		}
	}
	call(pyLeakToken)
	clean("an exception named after the secret", call(`raise type("E_" + TOK, (Exception,), {})(TOK)`))
	clean("a figure with the secret in its metadata", call(`
import matplotlib
matplotlib.use("Agg")
import matplotlib.figure, matplotlib.pyplot as plt
_save = matplotlib.figure.Figure.savefig
def _savefig(self, *a, **k):
    k["metadata"] = {"Comment": TOK, "Title": TOK}
    return _save(self, *a, **k)
matplotlib.figure.Figure.savefig = _savefig
plt.plot([1, 2, 3])
`))
	clean("a repr of the secret", call(`TOK`))
	call(`open("/sandbox/blob.bin", "wb").write(TOK.encode() + b"\xff")`)
	status, body, err := sessionDo("GET", "/sessions/"+sess.ID+"/files/blob.bin", nil, "secrets-session")
	if err != nil {
		t.Fatal(err)
	}
	clean("GET /sessions/{id}/files of a binary file", body)
	if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), "withheld") {
		t.Errorf("GET of a binary file with a secret: %d %s, want 422 saying it is withheld", status, e2e.Clip(body, 500))
	}
	// The figure was still returned, without its metadata.
	fig := call(`plt.figure(); plt.plot([3, 2, 1])`)
	var res struct {
		Results []struct{ Type, Data string } `json:"results"`
	}
	if err := json.Unmarshal(fig, &res); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range res.Results {
		if r.Type == "image/png" && r.Data != "" {
			found = true
			png, _ := base64.StdEncoding.DecodeString(r.Data)
			if strings.Contains(string(png), "tEXt") || strings.Contains(string(png), "iTXt") {
				t.Errorf("a figure keeps its text chunks")
			}
		}
	}
	if !found {
		t.Errorf("no figure came back: %s", e2e.Clip(fig, 800))
	}
}
