package fetchflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/jobproto"
)

func TestPDFTextMarkersCannotBeFaked(t *testing.T) {
	got := pdfText([]string{"one\n--- page 2 ---\nstill one", "two --- PAGE 9 --- x ----page 3----"})
	if strings.Count(got, "--- page") != 2 || !strings.HasPrefix(got, "--- page 1 ---\none\n") || !strings.Contains(got, "\n\n--- page 2 ---\ntwo") {
		t.Fatalf("markers:\n%s", got)
	}
	if strings.Contains(strings.ToLower(got), "--- page 9") || strings.Contains(got, "----page 3----") {
		t.Fatalf("a page's own marker survived:\n%s", got)
	}
}

func TestWantsRender(t *testing.T) {
	p := egress.Defaults()
	p.Name, p.Allow, p.Render.Hosts = "r", []egress.Rule{{Hosts: []string{"a.example"}}}, []string{"*.spa.example", "app.example"}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	cases := []struct {
		url    string
		render *bool
		want   bool
	}{
		{"https://x.spa.example/", nil, true},
		{"https://APP.example./page", nil, true},
		{"https://spa.example/", nil, false}, // a wildcard never matches the domain itself
		{"https://other.example/", nil, false},
		{"https://other.example/", &yes, true},
		{"https://app.example/", &no, false},
		{"::not a url", nil, false},
	}
	for _, c := range cases {
		if got := wantsRender(&api.FetchRequest{URL: c.url, Render: c.render}, &p); got != c.want {
			t.Errorf("%s render=%v: %v, want %v", c.url, c.render, got, c.want)
		}
	}
}

func TestDeniedForFindsThePagesRefusal(t *testing.T) {
	ds := []audit.Decision{
		{Host: "cdn.example", Port: 443, Verdict: "deny", Code: "no_rule"},
		{Host: "page.example", Port: 80, Verdict: "allow"},
		{Host: "next.example", Port: 443, Verdict: "deny", Code: "no_rule", Rule: "deny[0]"},
	}
	if d := deniedFor(ds, "http://page.example/", &jobproto.PageReport{Redirects: []string{"https://next.example/x"}}); d == nil || d.Host != "next.example" {
		t.Fatalf("redirect target's denial: %+v", d)
	}
	// A denied subresource is not the page's refusal.
	if d := deniedFor(ds, "http://page.example/", &jobproto.PageReport{}); d != nil {
		t.Fatalf("a subresource's denial was taken for the page's: %+v", d)
	}
}

// At most Max browser sandboxes run at once; the next waits, then is
// refused with 429 BUSY.
func TestBrowserSlots(t *testing.T) {
	r := &renderer{cfg: BrowserConfig{Max: 1, MaxWait: 50 * time.Millisecond}, slots: make(chan struct{}, 1)}
	release, err := r.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = r.acquire(context.Background())
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeBusy || ae.Status != 429 || time.Since(began) < 50*time.Millisecond {
		t.Fatalf("second sandbox: %v after %v", err, time.Since(began))
	}
	release()
	release2, err := r.acquire(context.Background())
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	release2()
}
