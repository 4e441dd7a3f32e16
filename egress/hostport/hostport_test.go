package hostport

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeHost(t *testing.T) {
	cases := []struct {
		in   string
		want string // "" means an error
		ip   bool
	}{
		{"example.com", "example.com", false},
		{"EXAMPLE.com.", "example.com", false},
		{"ｅｘａｍｐｌｅ.com", "example.com", false},
		{"bücher.example", "xn--bcher-kva.example", false},
		{"faß.de", "xn--fa-hia.de", false}, // non-transitional
		{"a\u3002b", "a.b", false},         // ideographic full stop
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"2130706433", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"0177.0.0.01", "127.0.0.1", true},
		{"0x", "0.0.0.0", true},
		{"0", "0.0.0.0", true},
		{"1.0x10.3", "1.16.0.3", true},
		{"4294967295", "255.255.255.255", true},
		{"4294967296", "", true},
		{"256.0.0.1", "", true},
		{"1.2.3.256", "", true},
		{"1.2.65536", "", true},
		{"09", "", true},
		{"0x1g", "0x1g", false}, // not a number: a name
		{"1.2.3.4.5", "", true},
		{"00000000000000000000000000001", "0.0.0.1", true},
		{"0x0000000000000000000000000000000ff", "0.0.0.255", true},
		{"99999999999999999999999", "", true},
		{"[::1]", "::1", true},
		{"[::FFFF:127.0.0.1]", "::ffff:127.0.0.1", true},
		{"[fe80::1%eth0]", "", true},
		{"[127.0.0.1]", "", true},
		{"[::1", "", true},
		{"", "", false},
		{".", "", false},
		{"a..b", "", false},
		{".a", "", false},
		{"a.b..", "", false},
		{"-a.com", "", false},
		{"a-.com", "", false},
		{"a_b.com", "", false},
		{"a b", "", false},
		{"a%00b", "", false},
		{"a@b", "", false},
		{"a:b", "", false},
		{"xn--zz.com", "", false},
		{strings.Repeat("a", 64) + ".com", "", false},
		{strings.Repeat("a.", 125) + "abc", strings.Repeat("a.", 125) + "abc", false}, // 253 bytes
		{strings.Repeat("a.", 127) + "a", "", false},
	}
	for _, tc := range cases {
		got, ip, err := NormalizeHost(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("NormalizeHost(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want || ip.IsValid() != tc.ip {
			t.Errorf("NormalizeHost(%q) = %q, ip=%v, %v; want %q ip=%v", tc.in, got, ip, err, tc.want, tc.ip)
		}
	}
}

func TestNormalizeName(t *testing.T) {
	if got, err := NormalizeName("Bücher.Example."); err != nil || got != "xn--bcher-kva.example" {
		t.Errorf("NormalizeName of a name = %q, %v", got, err)
	}
	for _, in := range []string{"127.0.0.1", "0x7f.1", "[::1]", "a..b", ""} {
		if got, err := NormalizeName(in); err == nil {
			t.Errorf("NormalizeName(%q) = %q, want an error", in, got)
		}
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "80": 80, "65535": 65535, "": -1, "0": -1, "65536": -1, "+1": -1, "-1": -1, "01": -1, "1 ": -1, "0x50": -1, "999999": -1} {
		got, err := ParsePort(in)
		if (err == nil) != (want > 0) || (err == nil && int(got) != want) {
			t.Errorf("ParsePort(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestParseURL(t *testing.T) {
	cases := []struct {
		in        string
		authority string
		header    string
		kind      Kind
	}{
		{"http://example.com/", "example.com:80", "example.com", ""},
		{"HTTPS://Example.COM:443/a?b#c", "example.com:443", "example.com:443", ""},
		{"http://[::1]:8080/", "[::1]:8080", "[::1]:8080", ""},
		{"http://[::1]/", "[::1]:80", "[::1]", ""},
		{"https://0x7f.1/", "127.0.0.1:443", "127.0.0.1", ""},
		{"ftp://example.com/", "", "", KindScheme},
		{"javascript:alert(1)", "", "", KindScheme},
		{"http://u@example.com/", "", "", KindUserinfo},
		{"http://u:p@example.com/", "", "", KindUserinfo},
		{`http://a\@b/`, "", "", KindURL},
		{"http://example.com:99999/", "", "", KindPort},
		{"http://example.com:0/", "", "", KindPort},
		{"http:///path", "", "", KindURL},
		{"/relative", "", "", KindURL},
		{"http://exa mple.com/", "", "", KindURL},
		{"http://example.com/\x7f", "", "", KindURL},
		{"http://" + strings.Repeat("a", MaxURLLen), "", "", KindURL},
	}
	for _, tc := range cases {
		got, err := ParseURL(tc.in)
		if tc.kind != "" {
			var e *Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Errorf("ParseURL(%q) error = %v, want kind %s", tc.in, err, tc.kind)
			}
			continue
		}
		if err != nil || got.Authority() != tc.authority || got.HostHeader() != tc.header {
			t.Errorf("ParseURL(%q) = %q host header %q, %v; want %q, %q", tc.in, got.Authority(), got.HostHeader(), err, tc.authority, tc.header)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	for in, want := range map[string]string{
		"example.com:443":   "example.com:443",
		"EXAMPLE.com.:443":  "example.com:443",
		"[::1]:443":         "[::1]:443",
		"127.1:22":          "127.0.0.1:22",
		"example.com":       "",
		"example.com:":      "",
		"a@example.com:443": "",
		"example.com:443/":  "",
		"[::1]443":          "",
		"[::1]":             "",
		":443":              "",
		"exa mple.com:443":  "",
	} {
		got, err := ParseAuthority(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParseAuthority(%q) = %v, want an error", in, got)
			}
			continue
		}
		if err != nil || got.Authority() != want {
			t.Errorf("ParseAuthority(%q) = %q, %v; want %q", in, got.Authority(), err, want)
		}
	}
}

// FuzzNormalize checks the normaliser's invariants on any input: a result
// is idempotent, ASCII, lower case, without a trailing dot, a valid name or
// a canonical address; the same host written as a URL gives the same result.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"example.com", "EXAMPLE.COM.", "ｅｘａｍｐｌｅ.com", "bücher.example", "xn--bcher-kva.example",
		"2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0", "[::1]", "[::ffff:127.0.0.1]", "[fe80::1%eth0]",
		"a..b", ".a", "a.b..", "a_b", "ⓐllowed.com", "аllowed.com", "1.2.3.4.5", "0x", "09",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		host, ip, err := NormalizeHost(in)
		if err != nil {
			return
		}
		if host == "" || strings.HasSuffix(host, ".") || strings.ToLower(host) != host {
			t.Fatalf("NormalizeHost(%q) = %q: empty, trailing dot or upper case", in, host)
		}
		for i := 0; i < len(host); i++ {
			if host[i] >= utf8.RuneSelf {
				t.Fatalf("NormalizeHost(%q) = %q is not ASCII", in, host)
			}
		}
		if ip.IsValid() {
			if ip.String() != host {
				t.Fatalf("NormalizeHost(%q) = %q, address %v: not canonical", in, host, ip)
			}
			if _, err := netip.ParseAddr(host); err != nil {
				t.Fatalf("NormalizeHost(%q) = %q is not an address", in, host)
			}
		} else {
			if _, err := netip.ParseAddr(host); err == nil {
				t.Fatalf("NormalizeHost(%q) = %q parses as an address but was returned as a name", in, host)
			}
			if err := checkName(host); err != nil {
				t.Fatalf("NormalizeHost(%q) = %q: %v", in, host, err)
			}
		}
		again := host
		if ip.Is6() {
			again = "[" + host + "]"
		}
		host2, ip2, err := NormalizeHost(again)
		if err != nil || host2 != host || ip2 != ip {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", in, host, host2, err)
		}
		// The URL path sees the same host (when url.Parse accepts it).
		if u, err := url.Parse("http://" + in + "/"); err == nil && u.Host == in {
			if tg, err := ParseURL("http://" + in + "/"); err == nil && tg.Host != host {
				t.Fatalf("ParseURL host %q differs from NormalizeHost %q for %q", tg.Host, host, in)
			}
		}
	})
}

// FuzzParseURL checks that a parsed target re-parses to itself and that
// nothing but http and https gets through.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "https://[::1]:8443/x", "http://u@h/", `http://a\@b/`, "file:///etc/passwd",
		"http://0x7f.1:80/", "http://evil.com#@allowed.com/", "HTTP://A.COM./", "http://a:0443/", "gopher://x/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tg, err := ParseURL(in)
		if err != nil {
			return
		}
		if tg.Scheme != "http" && tg.Scheme != "https" {
			t.Fatalf("ParseURL(%q) scheme %q", in, tg.Scheme)
		}
		if tg.Port == 0 {
			t.Fatalf("ParseURL(%q) port 0", in)
		}
		again, err := ParseURL(tg.Scheme + "://" + tg.Authority() + "/")
		if err != nil || again.HostPort != tg.HostPort {
			t.Fatalf("ParseURL(%q) = %+v does not re-parse to itself: %+v, %v", in, tg, again, err)
		}
	})
}
