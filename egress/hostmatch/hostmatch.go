// Package hostmatch parses and matches the host patterns of egress rules.
//
// A pattern is an exact name ("deb.debian.org") or a wildcard
// ("*.wikipedia.org"). A wildcard matches names below its suffix at any
// depth ("en.wikipedia.org", "upload.en.wikipedia.org") and never the suffix
// itself ("wikipedia.org" needs its own exact pattern) nor a name that merely
// ends in the same letters ("evilwikipedia.org"). Patterns are normalised
// exactly as request hosts are (lower case, no trailing dot, punycode), so
// that a pattern and a host compare byte for byte.
package hostmatch

import (
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/egress/hostport"
)

// Pattern is a parsed host pattern. The zero Pattern matches nothing.
type Pattern struct {
	// name is the exact name, or for a wildcard the suffix without "*.".
	name     string
	wildcard bool
}

// Parse parses and normalises a host pattern. It refuses what would match
// everything ("*", "*.*"), a whole top-level domain ("*.com"), a "*"
// anywhere but as the whole first label, IP addresses (allow_cidrs governs
// addresses; rules name hosts) and anything that is not a valid name.
func Parse(s string) (Pattern, error) {
	if strings.TrimSpace(s) != s || s == "" {
		return Pattern{}, fmt.Errorf("host pattern %q is empty or has surrounding spaces", s)
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	switch {
	case s == "*" || s == "**" || s == "*." || rest == "*" || strings.HasPrefix(rest, "*."):
		return Pattern{}, fmt.Errorf("host pattern %q matches every host; name the hosts or domains to allow, e.g. \"*.example.com\"", s)
	case strings.Contains(rest, "*"):
		return Pattern{}, fmt.Errorf("host pattern %q has a '*' that is not the whole first label; wildcards are written \"*.example.com\" and match subdomains only", s)
	}
	name, ip, err := hostport.NormalizeHost(rest)
	if err != nil {
		return Pattern{}, fmt.Errorf("host pattern %q is not a valid host name: %s", s, errMsg(err))
	}
	if ip.IsValid() {
		return Pattern{}, fmt.Errorf("host pattern %q is an IP address; rules match host names only (requests to IP addresses match no rule)", s)
	}
	if wildcard && !strings.Contains(name, ".") {
		return Pattern{}, fmt.Errorf("host pattern %q matches every name under the top-level domain %q; name a registered domain, e.g. \"*.example.%s\"", s, name, name)
	}
	return Pattern{name: name, wildcard: wildcard}, nil
}

// MustParse is Parse for patterns known to be valid; it panics otherwise.
func MustParse(s string) Pattern {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

func errMsg(err error) string {
	if e, ok := err.(*hostport.Error); ok {
		return e.Msg
	}
	return err.Error()
}

// Match reports whether a normalised host (as hostport returns it) matches.
func (p Pattern) Match(host string) bool {
	if p.name == "" {
		return false
	}
	if !p.wildcard {
		return host == p.name
	}
	return len(host) > len(p.name)+1 &&
		strings.HasSuffix(host, p.name) &&
		host[len(host)-len(p.name)-1] == '.'
}

// Wildcard reports whether the pattern is "*.suffix".
func (p Pattern) Wildcard() bool { return p.wildcard }

// String returns the normalised pattern.
func (p Pattern) String() string {
	if p.wildcard {
		return "*." + p.name
	}
	return p.name
}
