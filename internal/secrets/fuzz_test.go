package secrets

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// FuzzParse: no secrets file makes the parser panic, and no error ever
// shows a value read from the environment.
func FuzzParse(f *testing.F) {
	f.Add([]byte(testSet))
	f.Add([]byte("secrets:\n  - {name: s, tenants: [a], hosts: [a.test], header: 'A: {secret}', value_env: STRIPE_KEY}\n"))
	f.Add([]byte("secrets: [{name: x, tenants: [a], hosts: ['*.a.test'], basic_auth: {username: '{secret}', password: ''}, value_env: SHORT, ports: [1, 65535], schemes: [http]}]"))
	f.Add([]byte("secrets:\n  - &a {name: s}\n  - *a\n"))
	f.Add([]byte("secrets:\n\t- x\n"))
	env := testEnv(map[string]string{"STRIPE_KEY": testValue, "SHORT": "abc-" + testValue[:2], "SEARCH_KEY": testValue, "BASIC_KEY": testValue})
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("f.yaml", data, env)
		if err != nil {
			if strings.Contains(err.Error(), testValue) {
				t.Fatalf("an error shows the value: %v", err)
			}
			return
		}
		for _, n := range set.Names() {
			s := set.Get(n)
			if len(s.Value()) < MinValueLen || len(s.Hosts) == 0 || len(s.Tenants) == 0 || len(s.Ports) == 0 || s.Apply == "" {
				t.Fatalf("a loaded secret is incomplete: %+v", s)
			}
		}
	})
}

// FuzzPrepare: whatever request the code sends (a raw HTTP/1.1 request as
// it arrives at the proxy, placeholders spliced in anywhere), Prepare never
// panics; what it lets through holds no placeholder anywhere in its URL or
// headers; and the value is in it only when the request goes where the
// secret may go, in the secret's slot.
func FuzzPrepare(f *testing.F) {
	_, r := testRun(f)
	ph := r.Env()
	f.Add("GET https://api.stripe.com/v1 HTTP/1.1\r\nHost: api.stripe.com\r\nAuthorization: Bearer {S}\r\n\r\n", "api.stripe.com", uint16(443), true)
	f.Add("GET http://x.search.test/?api_key={Q}&b={Q} HTTP/1.1\r\nHost: x\r\n\r\n", "x.search.test", uint16(80), false)
	f.Add("GET https://basic.test/ HTTP/1.1\r\nHost: x\r\nAuthorization: Basic dXNlcjp7Qn0=\r\n\r\n", "basic.test", uint16(443), true)
	f.Add("GET https://evil.test/{S} HTTP/1.1\r\nHost: x\r\nX-A: {S}\r\n\r\n", "evil.test", uint16(443), true)
	f.Add("GET https://api.stripe.com/%73bx_secret_ HTTP/1.1\r\nHost: x\r\n\r\n", "api.stripe.com", uint16(443), true)
	f.Fuzz(func(t *testing.T, raw, host string, port uint16, https bool) {
		raw = strings.NewReplacer("{S}", ph["SANDBOXD_SECRET_STRIPE"], "{Q}", ph["SANDBOXD_SECRET_SEARCH"], "{B}", ph["SANDBOXD_SECRET_BASIC"]).Replace(raw)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		scheme := "http"
		if https {
			scheme = "https"
		}
		injected, d := r.Prepare(req, scheme, host, port)
		if d != nil {
			if injected != nil || strings.Contains(d.Reason, testValue) {
				t.Fatalf("a denial with injections %v or the value: %+v", injected, d)
			}
			return
		}
		var dump bytes.Buffer
		dump.WriteString(req.URL.String() + "\n" + req.Host + "\n")
		_ = req.Header.Write(&dump)
		low := strings.ToLower(dump.String())
		for _, p := range ph {
			if strings.Contains(low, p) || strings.Contains(strings.ToLower(unescape(dump.String())), p) {
				t.Fatalf("a placeholder passed:\n%s", dump.String())
			}
		}
		for _, b := range r.bindings {
			s := b.secret
			if !NewLiterals(s).Contains(dump.Bytes()) {
				continue
			}
			if !s.Goes(scheme, host, port) {
				t.Fatalf("secret %s went to %s://%s:%d:\n%s", s.Name, scheme, host, port, dump.String())
			}
		}
	})
}
