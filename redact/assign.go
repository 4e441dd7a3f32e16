package redact

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The assignment rule: a value assigned to a name that says it holds a
// secret. The keyword (pass, pwd, secret, token, key, auth, cred) is the
// start of the work, not the test: the whole name around it is read and
// split into parts (some_api_token_123 -> some, api, token, 123;
// mySecretString -> my, secret, string), and it names a secret when one
// part does (password, passwd, pwd, passphrase, ...pass; secret, token,
// credentials, creds, auth, apikey; key after api, access, private,
// client, ...), and no part makes it something else (public, id, name,
// url, file, length, hash, ...). Then come the separator and the value, in
// any of these forms:
//
//	name = v, name := v, name ::= v, name :::= v, name ?= v, name .= v,
//	name += v, name => v, name: v, "name": "v", name="v" (attributes),
//	var name string = "v", let name: &str = "v", name = `v` (raw strings),
//	<name>v</name> (also across lines), --name v, --name=v,
//	f("NAME", "v") (setProperty, GetEnvOrDefault, environ.get, ...).
//
// A quoted value is taken whole however long it is (within the window); a
// bare one runs to a blank, a quote, a comma, a semicolon or an escaped
// newline. Values that stand for a secret instead of being one are left:
// placeholders, references, code, and for other names than passwords,
// values without a digit or a symbol, of low entropy, or caught by
// gitleaks' allowlists for its generic rule.

const (
	// nameSpan bounds the name before its keyword; assignSpan the name
	// after it, the separator and the value.
	nameSpan   = 64
	assignSpan = 64 + 32 + 2048
	// maxBareValue bounds an unquoted value (gitleaks' generic rule reads
	// 150 bytes); a quoted one may be as long as assignSpan allows.
	maxBareValue = 512
)

func assignSpecs() []spec {
	return []spec{
		{typ: "password", kw: []string{"pass", "pwd"}, anchored: true, prio: prioGeneric, before: nameSpan, after: assignSpan,
			re: `(?i)pass|pwd`, check: assignCheck(true)},
		{typ: "generic_secret", kw: []string{"secret", "token", "key", "auth", "cred"}, anchored: true, prio: prioGeneric + 1,
			before: nameSpan, after: assignSpan,
			re: `(?i)secret|token|key|auth|cred`, check: assignCheck(false)},
	}
}

// assignCheck reads the assignment around the keyword at m[0]:m[1]; it
// keeps it when the name is a password's (password) or another secret's
// (!password).
func assignCheck(password bool) func(win []byte, m []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		// Look no further than the window would (the baseline passes
		// the whole text).
		lo, hi := max(0, m[0]-nameSpan), min(len(win), m[1]+assignSpan)
		a, ok := parseAssignment(win[:hi], lo, m[0], m[1])
		if !ok || a.password != password {
			return 0, 0, false
		}
		if !valueOK(win[:hi], a) {
			return 0, 0, false
		}
		return a.vs, a.ve, true
	}
}

// assignment is a parsed name = value.
type assignment struct {
	ns, ne     int // the name
	vs, ve     int // the value
	password   bool
	delimited  bool // quoted or inside a tag
	flag       bool // --name value
	sep        byte // the separator's last byte ('=', ':', ',', '>', ' ')
	quotedName bool
}

func isNameByte(b byte) bool {
	return isWord(b) || b == '.' || b == '-' || b == '$' || b == '@'
}

// parseAssignment finds the name around win[ks:ke] (not starting before
// lo), its separator and its value.
func parseAssignment(win []byte, lo, ks, ke int) (assignment, bool) {
	var a assignment
	ns := ks
	for ns > lo && isNameByte(win[ns-1]) {
		ns--
	}
	ne := ke
	for ne < len(win) && ne-ks < 64 && isNameByte(win[ne]) {
		ne++
	}
	// Trailing dots and dashes belong to the syntax (a.b.=, --flag-).
	for ne > ke && (win[ne-1] == '.' || win[ne-1] == '-') {
		ne--
	}
	for ns < ks && (win[ns] == '.' || win[ns] == '-' || win[ns] == '$' || win[ns] == '@') {
		ns++
	}
	if ne < len(win) && isNameByte(win[ne]) && win[ne] != '.' && win[ne] != '-' {
		return a, false // a name longer than we read
	}
	a.ns, a.ne = ns, ne
	secret, password := namesSecret(win[ns:ne])
	if !secret {
		return a, false
	}
	a.password = password
	i := ne
	// The name's own delimiters: "name", 'name', <name>, [name], --name.
	open := byte(0)
	if ns > 0 {
		open = win[ns-1]
	}
	a.flag = ns >= 2 && win[ns-1] == '-' && win[ns-2] == '-'
	if open == '<' {
		return parseTag(win, a)
	}
	inString := false
	if open == '"' || open == '\'' {
		if i < len(win) && win[i] == open {
			a.quotedName = true
			i++
		} else {
			inString = true // "NAME=" + value: the quote after = closes it
		}
	}
	if string(win[ns:ne]) == "PWD" || string(win[ns:ne]) == "OLDPWD" {
		return a, false // the shell's working directory
	}
	if i < len(win) && open == '[' && win[i] == ']' {
		i++
	}
	i = skipBlanks(win, i, 4)
	// A type: var name string = ..., let name: &str = ..., name: string = ...
	i = skipType(win, i)
	if i >= len(win) {
		return a, false
	}
	// The separator.
	j := i
	switch b := win[i]; {
	case b == ':':
		k := i
		for k < len(win) && k-i < 3 && win[k] == ':' {
			k++
		}
		if k < len(win) && win[k] == '=' {
			j = k + 1
			a.sep = '='
		} else if k == i+1 {
			j = i + 1
			a.sep = ':'
		} else {
			return a, false // a::b
		}
	case b == '=':
		if i+1 < len(win) && win[i+1] == '=' {
			return a, false // a comparison
		}
		j = i + 1
		a.sep = '='
		if j < len(win) && win[j] == '>' {
			j++
			a.sep = '>'
		}
	case (b == '?' || b == '.' || b == '+') && i+1 < len(win) && win[i+1] == '=':
		j = i + 2
		a.sep = '='
		if j < len(win) && win[j] == '=' {
			return a, false
		}
	case b == ',' && a.quotedName:
		j = i + 1
		a.sep = ','
	case a.flag && j > ne && (b != '-' || !(i+1 < len(win) && win[i+1] == '-')):
		// --name value
		a.sep = ' '
	default:
		return a, false
	}
	if a.sep == ':' && !a.quotedName && j < len(win) && win[j] != ' ' && win[j] != '\t' && win[j] != '"' && win[j] != '\'' {
		return a, false // a:b:c, not a YAML or header value
	}
	if a.sep == ':' && string(win[ns:ne]) == "PASS" {
		return a, false // a test's status: --- PASS: TestX_y (go test), PASS: file
	}
	// The value.
	if a.sep == ',' || a.sep == '>' {
		j = skipSpace(win, j, 64)
	} else {
		j = skipBlanks(win, j, 8)
	}
	if inString && j < len(win) && win[j] == open {
		return a, false
	}
	return parseValue(win, a, j)
}

// parseTag reads <name>value</name>, the value maybe on lines of its own.
func parseTag(win []byte, a assignment) (assignment, bool) {
	i := a.ne
	if i >= len(win) || win[i] != '>' {
		return a, false
	}
	s := skipSpace(win, i+1, 64)
	e := s
	for e < len(win) && win[e] != '<' {
		e++
	}
	if e >= len(win) || e+1 >= len(win) || win[e+1] != '/' {
		return a, false
	}
	v := bytes.TrimRight(win[s:e], " \t\r\n")
	if len(v) == 0 || bytes.ContainsAny(v, "\r\n") {
		return a, false
	}
	a.vs, a.ve, a.delimited, a.sep = s, s+len(v), true, '>'
	return a, true
}

// parseValue reads the value that starts at j.
func parseValue(win []byte, a assignment, j int) (assignment, bool) {
	if j >= len(win) {
		return a, false
	}
	switch q := win[j]; q {
	case '"', '\'', '`':
		e := j + 1
		for e < len(win) && win[e] != q && (q == '`' || win[e] != '\n') {
			if win[e] == '\\' && q != '`' {
				e++
			}
			e++
		}
		if e >= len(win) {
			return a, false
		}
		a.vs, a.ve, a.delimited = j+1, e, true
		return a, e > j+1
	case '\\':
		// An escaped quote: "key": \"value\" inside a JSON string.
		if j+1 < len(win) && win[j+1] == '"' {
			e := bytes.Index(win[j+2:], []byte(`\"`))
			if e <= 0 {
				return a, false
			}
			a.vs, a.ve, a.delimited = j+2, j+2+e, true
			return a, true
		}
		return a, false
	}
	if a.sep == ',' {
		return a, false // f("NAME", value): only a quoted literal
	}
	e := j
	for e < len(win) {
		b := win[e]
		if b <= ' ' || b == '"' || b == '\'' || b == '`' || b == ',' || b == ';' || b == '<' || b == '>' || b == 0x7f {
			break
		}
		if e-j >= maxBareValue {
			return a, false // minified code or data, not a value
		}
		if b == '&' && queryParam(win[e+1:]) {
			break // a=b&c=d
		}
		if b == '\\' && e+1 < len(win) && (win[e+1] == 'n' || win[e+1] == 'r' || win[e+1] == 't' || win[e+1] == '"') {
			break
		}
		e++
	}
	if elided(win[j:e]) {
		return a, false
	}
	v := bytes.TrimRight(win[j:e], ".!?:)]}")
	if len(v) == 0 {
		return a, false
	}
	a.vs, a.ve = j, j+len(v)
	return a, true
}

// queryParam: rest starts with name= (the next parameter of a query).
func queryParam(rest []byte) bool {
	i := 0
	for i < len(rest) && i < 64 && (isWord(rest[i]) || rest[i] == '.' || rest[i] == '-' || rest[i] == '[' || rest[i] == ']') {
		i++
	}
	return i > 0 && i < len(rest) && rest[i] == '='
}

func skipBlanks(win []byte, i, n int) int {
	for k := 0; k < n && i < len(win) && (win[i] == ' ' || win[i] == '\t'); k++ {
		i++
	}
	return i
}

func skipSpace(win []byte, i, n int) int {
	for k := 0; k < n && i < len(win) && (win[i] == ' ' || win[i] == '\t' || win[i] == '\r' || win[i] == '\n'); k++ {
		i++
	}
	return i
}

var typeWords = []string{"string", "String", "str", "&str", "&'static str", "[]byte", "char*", "char *", "const char*", "SecureString", "text", "varchar"}

// skipType skips a declared type between a name and its separator:
// " string =", ": &str =", ": String =".
func skipType(win []byte, i int) int {
	j := i
	colon := j < len(win) && win[j] == ':'
	if colon {
		j = skipBlanks(win, j+1, 4)
	}
	for _, t := range typeWords {
		if bytes.HasPrefix(win[j:], []byte(t)) {
			k := skipBlanks(win, j+len(t), 4)
			if k < len(win) && win[k] == '=' && (k+1 >= len(win) || win[k+1] != '=') && (colon || k > j+len(t) || j > i) {
				return k
			}
		}
	}
	return i
}

// nameParts splits a name into lower-case parts at _ . - $ @, digits and
// camelCase boundaries: "mySecretString" -> my secret string,
// "APIKey" -> api key, "token2" -> token 2.
func nameParts(name []byte) []string {
	var parts []string
	start := 0
	flush := func(i int) {
		if i > start {
			parts = append(parts, strings.ToLower(string(name[start:i])))
		}
		start = i
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !isLetter(b) && !('0' <= b && b <= '9') {
			flush(i)
			start = i + 1
			continue
		}
		if i == start {
			continue
		}
		p := name[i-1]
		isUp := 'A' <= b && b <= 'Z'
		isDig := '0' <= b && b <= '9'
		pUp := 'A' <= p && p <= 'Z'
		pDig := '0' <= p && p <= '9'
		switch {
		case isDig != pDig:
			flush(i)
		case isUp && !pUp && !pDig:
			flush(i) // mySecret
		case isUp && pUp && i+1 < len(name) && 'a' <= name[i+1] && name[i+1] <= 'z':
			flush(i) // APIKey
		}
	}
	flush(len(name))
	return parts
}

var (
	passWords = map[string]bool{"pass": true, "passwd": true, "password": true, "passwords": true, "passphrase": true,
		"pwd": true, "passwort": true, "passcode": true, "pword": true}
	passSuffixes   = []string{"password", "passwd", "passphrase", "pwd", "pass"}
	notPass        = map[string]bool{"bypass": true, "compass": true, "surpass": true, "overpass": true, "underpass": true, "encompass": true, "trespass": true, "impass": true}
	secretWords    = map[string]bool{"secret": true, "secrets": true, "token": true, "tokens": true, "credential": true, "credentials": true, "cred": true, "creds": true, "auth": true, "apikey": true}
	secretSuffixes = []string{"secret", "token", "apikey", "credentials", "credential", "creds", "privatekey", "secretkey", "accesskey", "authkey"}
	// keyQualifiers make "key" a secret's name: api key, private key...
	keyQualifiers = map[string]bool{"api": true, "access": true, "private": true, "secret": true, "auth": true, "client": true,
		"signing": true, "sign": true, "encryption": true, "enc": true, "master": true, "app": true, "account": true,
		"license": true, "licence": true, "service": true, "session": true, "sas": true, "storage": true, "admin": true,
		"consumer": true, "shared": true, "root": true, "user": true, "hmac": true, "jwt": true, "webhook": true,
		"subscription": true, "write": true, "deploy": true, "ingest": true, "integration": true, "x": true, "dev": true,
		"prod": true, "live": true, "server": true, "bot": true, "cipher": true, "crypt": true, "aes": true, "rsa": true}
	// notSecretParts: a name with one of these parts is about a secret,
	// not one (an id, a name, a URL, a size, a public key...).
	notSecretParts = map[string]bool{"public": true, "pub": true, "primary": true, "foreign": true, "csrf": true, "xsrf": true,
		"id": true, "ids": true, "uuid": true, "name": true, "names": true, "url": true, "uri": true, "urls": true,
		"endpoint": true, "file": true, "filename": true, "path": true, "dir": true, "length": true, "len": true,
		"size": true, "type": true, "types": true, "version": true, "hash": true, "hashed": true, "count": true,
		"max": true, "min": true, "prefix": true, "suffix": true, "field": true, "fields": true, "header": true,
		"param": true, "params": true, "format": true, "event": true, "index": true, "idx": true, "alias": true,
		"policy": true, "store": true, "ring": true, "pair": true, "mode": true, "kind": true, "expiry": true,
		"expires": true, "expiration": true, "expire": true, "timeout": true, "ttl": true, "method": true, "hint": true,
		"label": true, "column": true, "regex": true, "pattern": true, "limit": true, "bits": true, "algorithm": true,
		"algo": true, "usage": true, "location": true, "ref": true, "source": true, "chars": true, "char": true,
		"enabled": true, "required": true, "placeholder": true, "description": true, "desc": true, "provider": true,
		"reset": true, "forgot": true, "policy_": true, "strength": true, "rule": true, "rules": true, "error": true,
		"message": true, "msg": true, "prompt": true, "lifetime": true, "schema": true, "sequence": true,
		"bucket": true, "natural": true, "hot": true, "code": true, "press": true, "pressed": true, "down": true,
		"up": true, "left": true, "right": true, "board": true, "frame": true, "stone": true, "word": true,
		"signature": true, "mesh": true, "selector": true, "storetype": true, "keyword": true, "keyboard": true,
		"endpoints": true, "uris": true, "host": true, "port": true, "user": false, "username": true, "login": true,
		"validator": true, "validation": true, "status": true, "state": true, "flow": true, "accessor": true,
		"expired": true, "issuer": true, "audience": true, "scope": true, "scopes": true, "grant": true,
		"callback": true, "redirect": true, "len_": true, "fingerprint": true, "checksum": true, "digest": true,
		"salt": false, "rotation": true, "manager": true, "helper": true, "util": true, "utils": true}
)

// namesSecret: the name has a part that names a secret and none that makes
// it something else; password when that part is a password's.
func namesSecret(name []byte) (secret, password bool) {
	parts := nameParts(name)
	if len(parts) == 0 || len(parts) > 12 {
		return false, false
	}
	for i, p := range parts {
		if notSecretParts[p] {
			return false, false
		}
		switch {
		case passWords[p] || !notPass[p] && hasAnySuffix(p, passSuffixes):
			password = true
			secret = true
		case secretWords[p] || hasAnySuffix(p, secretSuffixes) && !strings.HasSuffix(p, "csrftoken") && !strings.HasSuffix(p, "xsrftoken"):
			secret = true
		case p == "key" && i > 0 && keyQualifiers[parts[i-1]]:
			secret = true
		case p == "key" && i > 1 && '0' <= parts[i-1][0] && parts[i-1][0] <= '9' && keyQualifiers[parts[i-2]]:
			secret = true
		}
	}
	return secret, password
}

func hasAnySuffix(p string, sufs []string) bool {
	for _, s := range sufs {
		if strings.HasSuffix(p, s) {
			return true
		}
	}
	return false
}

// valueOK: the value is a secret, not a placeholder, a reference or code.
func valueOK(win []byte, a assignment) bool {
	v := win[a.vs:a.ve]
	// A value that holds its own name ("encryptionKey": "encryptionKey1024")
	// is a label; one that an operator continues (tokens = 2*n + m) is an
	// expression.
	if name := win[a.ns:a.ne]; len(name) >= 8 && bytes.Contains(bytes.ToLower(v), bytes.ToLower(name)) {
		return false
	}
	if !a.delimited && continued(win, a.ve) {
		return false
	}
	if a.password {
		return passwordOK(win, a, v)
	}
	return secretOK(win, a, v)
}

// continued: after win[:i] comes a binary operator between blanks and
// more (x = a*b + c, x = y - 1).
func continued(win []byte, i int) bool {
	j := skipBlanks(win, i, 4)
	if j == i || j+1 >= len(win) || bytes.IndexByte([]byte("+-*/%|&^"), win[j]) < 0 {
		return false
	}
	k := j + 1
	if k < len(win) && win[k] == win[j] { // ||, &&
		k++
	}
	return k < len(win) && (win[k] == ' ' || win[k] == '\t')
}

func passwordOK(win []byte, a assignment, v []byte) bool {
	if len(v) < 6 || isPlaceholder(v) || sequential(v) {
		return false
	}
	if v[0] == '/' && bytes.IndexByte(v[1:], '/') >= 0 || !a.delimited && looksLikeCode(v) {
		return false
	}
	var digit, upper, lower, other bool
	for i, b := range v {
		switch {
		case '0' <= b && b <= '9':
			digit = true
		case 'A' <= b && b <= 'Z':
			upper = upper || i > 0
		case 'a' <= b && b <= 'z':
			lower = true
		default:
			other = true
		}
	}
	switch {
	case digit || other:
		if !digit && !upper && !lower {
			return false // punctuation only
		}
	case !a.delimited:
		// Letters only, unquoted: code (password: newPassword) unless
		// it is an env file line (DB_PASSWORD=hunter).
		if !envStyle(win, a.ns) {
			return false
		}
	case !(upper && lower):
		return false
	}
	return true
}

func secretOK(win []byte, a assignment, v []byte) bool {
	if len(v) < 10 || isPlaceholder(v) || sequential(v) || bytes.IndexByte(v, ':') >= 0 || elided(v) {
		return false
	}
	if !a.delimited && looksLikeCode(v) {
		return false
	}
	var digit, letter, symbol, upper bool
	for _, b := range v {
		switch {
		case '0' <= b && b <= '9':
			digit = true
		case isLetter(b):
			letter = true
			upper = upper || b <= 'Z'
		case b == ' ':
			return false
		default:
			symbol = true
		}
	}
	// gitleaks' threshold for its generic rule.
	// Short values in one case are mostly ids and hashes.
	if len(v) < 20 && !upper && !symbol {
		return false
	}
	if !letter || !digit && !symbol || runeEntropy(v) <= 3.5 {
		return false
	}
	// A provider's prefix: the provider's rule decides (xoxp-1234-1234…
	// is no Slack token, sm_aat_ilu2oac3v7 no SettleMint one).
	for _, p := range providerPrefixes {
		if bytes.HasPrefix(v, []byte(p)) {
			return false
		}
	}
	for _, p := range gitleaksPrefixes() {
		if len(v) >= len(p) && equalFold(v[:len(p)], p) {
			return false
		}
	}
	// A dotted word list (a.b.c, host names) is not a token.
	if !digit && bytes.IndexByte(v, '.') >= 0 && bytes.Count(v, []byte(".")) >= 1 && !bytes.ContainsAny(v, "+/=_") {
		return false
	}
	return !genericAllowed(win, a, v)
}

var providerPrefixes = []string{"xoxb-", "xoxp-", "xoxa-", "xoxe", "xoxo-", "xoxs-", "xoxr-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
	"github_pat_", "glpat-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "AKIA", "ASIA", "AIza", "hvs.", "npm_", "pplx-"}

// gitleaksPrefixes are the distinctive prefixes of gitleaks' token rules
// (glue.go) of 6 bytes or more: shorter ones (sc_, API-) may start other
// secrets too.
var gitleaksPrefixes = sync.OnceValue(func() []string {
	var out []string
	rules, _ := gitleaksRules()
	for _, r := range rules {
		for _, l := range r.glue {
			if len(l.s) >= 6 && !slices.Contains(out, l.s) {
				out = append(out, l.s)
			}
		}
	}
	return out
})

// elided: a value cut short in documentation ("ops_eyJzaWdu...").
func elided(v []byte) bool {
	return bytes.HasSuffix(v, []byte("...")) || bytes.HasSuffix(v, []byte("…"))
}

// sequential: a run of 8 or more consecutive characters (abcdefgh,
// 12345678): an alphabet or a demo value, not a secret.
func sequential(v []byte) bool {
	run := 1
	for i := 1; i < len(v); i++ {
		if lower(v[i]) == lower(v[i-1])+1 {
			if run++; run >= 8 {
				return true
			}
		} else {
			run = 1
		}
	}
	return false
}

// gitleaks' allowlists of its generic-api-key rule, applied to the
// generic_secret values: stop words in the value, known non-secret
// name = value shapes in the match.
var genericAllowlists = sync.OnceValue(func() []allowlist {
	cfg, err := gitleaksRuleset()
	if err != nil {
		return nil
	}
	gr, ok := cfg.Rules["generic-api-key"]
	if !ok {
		return nil
	}
	var out []allowlist
	for _, a := range convertAllowlists(gr.Allowlists, gr.RuleID) {
		if a.target == "line" {
			continue // lines of code around the match: not for a stream
		}
		out = append(out, a)
	}
	return out
})

// longStopWords are the stop words of gitleaks' generic rule with 12 or
// more characters.
var longStopWords = sync.OnceValue(func() []string {
	var out []string
	for _, al := range genericAllowlists() {
		for _, w := range al.stopwords {
			if len(w) >= 12 {
				out = append(out, w)
			}
		}
	}
	return out
})

var onlyWordChars = regexp.MustCompile(`^[a-zA-Z_.-]+$`)

func genericAllowed(win []byte, a assignment, v []byte) bool {
	if onlyWordChars.Match(v) {
		return true
	}
	match := win[a.ns:a.ve]
	if a.delimited && a.ve < len(win) {
		match = win[a.ns : a.ve+1]
	}
	// Stop words only for values made of words (SalesResults-1.2,
	// prod5zyxlmy-cmk): in a random token, one of gitleaks' 1,400 stop
	// words (json, arch, ...) turns up by chance in several per cent.
	// A stop word of 12 characters or more is a known public value, not a
	// word (yarn's public apiKey 6fe4476e…): it applies to every value.
	secret := v
	if !bytes.ContainsAny(v, "-_. ") {
		secret = nil
		l := bytes.ToLower(v)
		for _, w := range longStopWords() {
			if bytes.Contains(l, []byte(w)) {
				return true
			}
		}
	}
	// The allowlist's expressions on the match are about the name
	// (public_token, key_id): one that only matches inside the value (a
	// random value that holds PublicToken) does not count.
	als := genericAllowlists()
	for i := range als {
		if als[i].allowedAt(secret, match, nil, a.vs-a.ns) {
			return true
		}
	}
	return false
}
