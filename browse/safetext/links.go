package safetext

import (
	"net/url"
	"strings"
)

// Limits on link targets in full mode.
const (
	maxURLLen = 1024
	maxLinks  = 1000
)

// linkTarget turns an href into a target that is safe to show: resolved
// against base, http or https only (javascript:, data:, vbscript:, file:,
// mailto: and every other scheme are dropped), without user info, query
// string or fragment, at most maxURLLen bytes, and with the characters
// that could end a Markdown link or break out of it percent-encoded. It
// returns "" for links to drop. Relative links need a base.
func linkTarget(href string, base *url.URL) string {
	// What browsers do before parsing: strip leading and trailing C0
	// controls and spaces, remove tabs and newlines anywhere, and read
	// backslashes as slashes in http(s) URLs.
	href = strings.TrimFunc(href, func(r rune) bool { return r <= ' ' })
	if strings.ContainsAny(href, "\t\n\r") {
		href = strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(href)
	}
	href = Clean(href)
	if href == "" || href[0] == '#' || len(href) > 4*maxURLLen {
		return ""
	}
	href = strings.ReplaceAll(href, `\`, "/")
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if base != nil {
		u = base.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "" {
		return ""
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>[]"'`+"`"+`\|{}^`, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&15])
			continue
		}
		b.WriteByte(c)
	}
	if b.Len() > maxURLLen {
		return ""
	}
	return b.String()
}
