package hostmatch

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/egress/hostport"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		want    string // normalised; "" means an error
		errText string
	}{
		{"example.com", "example.com", ""},
		{"Example.COM.", "example.com", ""},
		{"*.example.com", "*.example.com", ""},
		{"*.Bücher.example", "*.xn--bcher-kva.example", ""},
		{"*", "", "matches every host"},
		{"*.", "", "matches every host"},
		{"**", "", "matches every host"},
		{"*.*", "", "matches every host"},
		{"*.*.com", "", "matches every host"},
		{"*.com", "", "top-level domain"},
		{"*.com.", "", "top-level domain"},
		{"foo*.example.com", "", "not the whole first label"},
		{"a.*.example.com", "", "not the whole first label"},
		{"*example.com", "", "not the whole first label"},
		{"127.0.0.1", "", "IP address"},
		{"2130706433", "", "IP address"},
		{"[::1]", "", "IP address"},
		{"example..com", "", "not a valid host name"},
		{".example.com", "", "not a valid host name"},
		{"exa mple.com", "", "not a valid host name"},
		{"", "", "empty"},
		{" example.com", "", "spaces"},
		{"example.com:443", "", "not a valid host name"},
	}
	for _, tc := range cases {
		p, err := Parse(tc.in)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), tc.errText) {
				t.Errorf("Parse(%q) = %v, %v; want an error containing %q", tc.in, p, err, tc.errText)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, p, err, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, host string
		want          bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "www.example.com", false},
		{"example.com", "evilexample.com", false},
		{"example.com", "example.com.evil.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "evilexample.com", false},
		{"*.example.com", "www.evilexample.com", false},
		{"*.example.com", "example.com.evil.com", false},
		{"*.example.com", ".example.com", false},
		{"*.example.com", "xexample.com", false},
	}
	for _, tc := range cases {
		if got := MustParse(tc.pattern).Match(tc.host); got != tc.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
	if (Pattern{}).Match("") || (Pattern{}).Match("example.com") {
		t.Error("the zero Pattern matches")
	}
}

// FuzzMatch checks, for any pattern and host that parse, that a match means
// the host is the exact name or ends in "." + the wildcard's suffix, and
// that the matcher agrees with the normaliser: matching the raw host after
// normalisation is the same as matching its normalised form.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"example.com", "example.com"}, {"*.example.com", "www.example.com"}, {"*.example.com", "evilexample.com"},
		{"*.example.com", "example.com"}, {"bücher.example", "BÜCHER.example."}, {"*.mirror.test", "a.b.mirror.test"},
		{"allowed.com", "ａllowed.com"}, {"allowed.com", "аllowed.com"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, rawHost string) {
		p, err := Parse(pattern)
		if err != nil {
			return
		}
		host, ip, err := hostport.NormalizeHost(rawHost)
		if err != nil {
			return
		}
		m := p.Match(host)
		if ip.IsValid() && m {
			t.Fatalf("pattern %q matches the IP %q", p, host)
		}
		name := strings.TrimPrefix(p.String(), "*.")
		switch {
		case !p.Wildcard() && m != (host == name):
			t.Fatalf("exact %q vs %q: match %v", p, host, m)
		case p.Wildcard() && m != strings.HasSuffix(host, "."+name):
			t.Fatalf("wildcard %q vs %q: match %v", p, host, m)
		}
		// Re-parsing the normalised pattern gives the same matcher.
		if p2, err := Parse(p.String()); err != nil || p2 != p {
			t.Fatalf("Parse(%q) is not idempotent: %v, %v", p, p2, err)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	p := MustParse("*.wikipedia.org")
	for b.Loop() {
		p.Match("en.m.wikipedia.org")
	}
}
