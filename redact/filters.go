package redact

import (
	"bytes"
	"math"
)

// entropy is the Shannon entropy of v in bits per byte.
func entropy(v []byte) float64 {
	if len(v) == 0 {
		return 0
	}
	var n [256]int
	for _, b := range v {
		n[b]++
	}
	h, l := 0.0, float64(len(v))
	for _, c := range n {
		if c > 0 {
			p := float64(c) / l
			h -= p * math.Log2(p)
		}
	}
	return h
}

var placeholderWords = map[string]bool{
	"password": true, "passwd": true, "pass": true, "passphrase": true, "changeme": true, "change_me": true,
	"change-me": true, "changeit": true, "secret": true, "token": true, "apikey": true, "api_key": true,
	"null": true, "nil": true, "none": true, "true": true, "false": true, "undefined": true, "empty": true,
	"hidden": true, "masked": true, "required": true, "optional": true, "string": true, "value": true,
	"todo": true, "tbd": true, "fixme": true, "default": true, "secret_key": true, "access_token": true,
	"mypassword": true, "yourpassword": true, "my_password": true, "your_password": true,
}

// placeholderParts: a value containing one of these is a placeholder, not a
// secret (the usual stop words of secret scanners).
var placeholderParts = [][]byte{
	[]byte("example"), []byte("placeholder"), []byte("redacted"), []byte("changeme"), []byte("dummy"),
	[]byte("your_"), []byte("your-"), []byte("yourp"), []byte("yours"), []byte("yourt"), []byte("youra"),
	[]byte("xxxxx"), []byte("*****"), []byte("_here"), []byte("-here"), []byte("sample"),
	[]byte("password"), []byte("passwd"), []byte("secret"),
}

// isPlaceholder reports values that stand for a secret instead of being
// one: common words, runs of * or x, <...>, ${VAR}, $VAR, {{...}}, %(x)s,
// %VAR%, ENV_VAR_NAMES, already-redacted text.
func isPlaceholder(v []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return true
	}
	l := bytes.ToLower(v)
	if placeholderWords[string(l)] {
		return true
	}
	for _, p := range placeholderParts {
		if bytes.Contains(l, p) {
			return true
		}
	}
	// One repeated byte, ignoring separators (****, xxxx-xxxx, 000000).
	var first byte
	same := true
	for _, b := range l {
		if b == '-' || b == '_' || b == '.' || b == ' ' {
			continue
		}
		if first == 0 {
			first = b
		} else if b != first {
			same = false
			break
		}
	}
	if same {
		return true
	}
	last := v[len(v)-1]
	switch {
	case v[0] == '$' && len(v) > 1 && (isLetter(v[1]) || v[1] == '_' || v[1] == '{' || v[1] == '('):
		return true // $VAR, ${VAR}, $(cmd), ${{ secrets.X }}
	case v[0] == '<' && last == '>', v[0] == '{' && last == '}', v[0] == '[' && last == ']':
		return true
	case v[0] == '%' && len(v) > 1 && (v[1] == '(' || v[1] == 's' && len(v) == 2 || last == '%'):
		return true // %(name)s, %s, %VAR%
	case (v[0] == '#' || v[0] == '@') && len(v) > 1 && v[1] == '{':
		return true
	case bytes.HasPrefix(v, []byte("{{")) || bytes.HasSuffix(v, []byte("}}")):
		return true
	}
	// ENV_VAR_NAME: upper case and underscores only, at least one underscore.
	if bytes.IndexByte(v, '_') > 0 {
		env := true
		for _, b := range v {
			if !('A' <= b && b <= 'Z' || b == '_') {
				env = false
				break
			}
		}
		if env {
			return true
		}
	}
	return false
}

// looksLikeCode reports unquoted values that are expressions rather than
// literals: calls, dotted names without digits, pointers, slices.
func looksLikeCode(v []byte) bool {
	if bytes.IndexByte(v, '(') >= 0 || bytes.IndexByte(v, '[') >= 0 || bytes.Contains(v, []byte("->")) || namesCredential(v) {
		return true
	}
	if v[0] == '*' || v[0] == '&' || v[0] == '!' {
		return len(v) > 1 && (isLetter(v[1]) || v[1] == '_')
	}
	// a.b.c with letters, digits, _ and $ only, no digit at all.
	dots, digits := 0, 0
	for i, b := range v {
		switch {
		case b == '.':
			if i == 0 || i == len(v)-1 || v[i-1] == '.' {
				return false
			}
			dots++
		case '0' <= b && b <= '9':
			digits++
		case isLetter(b) || b == '_' || b == '$':
		default:
			return false
		}
	}
	return dots > 0 && digits == 0
}

var credentialWords = map[string]bool{"key": true, "keys": true, "token": true, "tokens": true, "private": true, "cert": true,
	"cred": true, "creds": true, "credential": true, "credentials": true, "pass": true, "password": true, "passwd": true,
	"secret": true, "secrets": true, "pwd": true, "apikey": true, "privatekey": true, "passphrase": true}

// namesCredential: an unquoted value that names a credential is a variable
// (testRSA2048PrivateKey, cfg.Token, dbPassword2), not a credential: its
// last word (as nameParts splits it, numbers aside) is a credential word,
// and it reads like a name, with at most one part of one or two letters,
// two numbers and six digits. A random token that happens to hold TOKEN or
// PASS (A000012TOKEN7189B2CXY7Za, PASS1012ABBCXYZacxbyCz20) has the word
// elsewhere, or more short parts and digits.
func namesCredential(v []byte) bool {
	last := ""
	short, nums, digits := 0, 0, 0
	for _, p := range nameParts(v) {
		switch {
		case '0' <= p[0] && p[0] <= '9':
			nums++
			digits += len(p)
			continue
		case len(p) < 3:
			short++
		}
		last = p
	}
	return credentialWords[last] && short <= 1 && nums <= 2 && digits <= 6
}

// placeholderToken: a provider token that is a placeholder, not a token
// (ghp_xxxx…, AKIAXXXX…, glc_1111…, hvs.aaaa…): six or more of one byte in
// a row, four x in a row, or a long token of low entropy.
func placeholderToken(v []byte) bool {
	run := 1
	for i := 1; i < len(v); i++ {
		if v[i] == v[i-1] {
			if run++; run >= 6 {
				return true
			}
		} else {
			run = 1
		}
	}
	l := bytes.ToLower(v)
	return bytes.Contains(l, []byte("xxxx")) || len(v) >= 20 && entropy(v) < 3
}
