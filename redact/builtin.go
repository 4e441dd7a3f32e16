package redact

import (
	"bytes"
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// spec describes a built-in rule.
type spec struct {
	typ string
	kw  []string
	cs  bool // keywords are case-sensitive
	re  string
	// anchored: every match starts at the keyword (so the regex runs
	// anchored there). What comes before the keyword does not matter: a
	// token glued to a letter, a digit, "_" or "%3D" is still a token.
	anchored           bool
	group              int
	minEntropy         float64
	before, after, ext int // 0: derived from the regex
	prio               int
	pre                func(win []byte, ks, ke int) bool
	check              func(win []byte, m []int) (int, int, bool)
}

// KeyBlockCap is the most text after a private key block's BEGIN line that
// is searched for its END line (and redacted when there is none). Key blocks
// are redacted whole up to this size; a longer block is redacted up to it.
const KeyBlockCap = 16 << 10

// longSpan bounds matches of the built-in rules whose regex is unbounded
// (JWTs, bearer credentials, base64-encoded keys, session tokens).
const longSpan = 16 << 10

// assignSep is the separator after a key in the AWS rules' key = value.
const assignSep = `["']?[ \t]{0,4}(?::=|=>|=|:)[ \t]{0,4}`

func builtinSpecs() []spec {
	b62 := `[0-9A-Za-z]`
	return append(assignSpecs(), []spec{
		// Cloud.
		{typ: "aws_access_key_id", kw: []string{"AKIA", "ASIA", "ABIA", "ACCA"}, cs: true, anchored: true,
			re: `(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b`, check: notExample(0)},
		{typ: "aws_secret_access_key", kw: []string{"secret_access_key", "secretaccesskey", "secret-access-key", "aws_secret_key", "awssecretkey", "aws-secret-key"},
			re:    `(?i)(?:(?:aws[_-]?)?secret[_-]?access[_-]?key|aws[_-]?secret[_-]?key)` + assignSep + `["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`,
			group: 1, minEntropy: 3.5, check: notExample(1)},
		{typ: "aws_session_token", kw: []string{"session_token", "sessiontoken", "session-token"}, anchored: true,
			re: `(?i)session[_-]?token` + assignSep + `["']?([A-Za-z0-9/+]{100,}={0,2})`, group: 1, after: longSpan, minEntropy: 4},
		{typ: "aws_session_token", kw: []string{"IQoJb3JpZ2luX2Vj", "FwoGZXIvYXdz"}, cs: true, anchored: true,
			re: `(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdz)[A-Za-z0-9/+]{80,}={0,2}`, after: longSpan},
		{typ: "google_api_key", kw: []string{"AIza"}, cs: true, anchored: true,
			re: `(AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)`, group: 1, check: gluedToken(len("AIza"), 1)},
		{typ: "google_oauth_client_secret", kw: []string{"GOCSPX-"}, cs: true, anchored: true,
			re: `(GOCSPX-[0-9A-Za-z_-]{28})(?:[^0-9A-Za-z_-]|$)`, group: 1},
		{typ: "google_oauth_access_token", kw: []string{"ya29."}, cs: true, anchored: true,
			re: `ya29\.[0-9A-Za-z_-]{30,1000}`},
		{typ: "azure_storage_key", kw: []string{"accountkey"}, anchored: true,
			re: `(?i)accountkey["']?[ \t]{0,4}[:=][ \t]{0,4}["']?([A-Za-z0-9+/]{86}==)`, group: 1},
		{typ: "azure_sas_token", kw: []string{"sig="}, anchored: true, minEntropy: 3.5,
			re: `(?i)sig=([A-Za-z0-9%+/]{40,120}(?:%3D|=){0,2})`, group: 1,
			pre: func(win []byte, ks, _ int) bool { return ks > 0 && bytes.IndexByte([]byte("?&;"), win[ks-1]) >= 0 }},
		{typ: "azure_client_secret", kw: []string{"Q~"}, cs: true, before: 5, minEntropy: 3.5,
			re: `[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}`, check: endBoundedBy(`A-Za-z0-9_~.-`)},

		// Code hosts.
		{typ: "github_pat", kw: []string{"ghp_"}, cs: true, anchored: true, re: `ghp_` + b62 + `{36}\b`},
		{typ: "github_oauth_token", kw: []string{"gho_"}, cs: true, anchored: true, re: `gho_` + b62 + `{36}\b`},
		{typ: "github_app_token", kw: []string{"ghu_", "ghs_"}, cs: true, anchored: true, re: `gh[us]_` + b62 + `{36}\b`},
		{typ: "github_refresh_token", kw: []string{"ghr_"}, cs: true, anchored: true, re: `ghr_` + b62 + `{36,76}\b`},
		{typ: "github_fine_grained_pat", kw: []string{"github_pat_"}, cs: true, anchored: true,
			re: `github_pat_[0-9A-Za-z_]{70,90}\b`},
		{typ: "gitlab_pat", kw: []string{"glpat-"}, cs: true, anchored: true,
			re: `glpat-[0-9A-Za-z_-]{20,300}(?:\.[0-9A-Za-z_-]{1,50}){0,3}`},
		{typ: "gitlab_token", kw: []string{"gldt-", "glrt-", "glptt-", "glcbt-", "glsoat-", "glffct-", "gloas-", "glimt-", "glagent-", "glft-", "glwt-", "GR1348941"},
			cs: true, anchored: true,
			re: `(?:(?:gldt|glrt|glptt|glcbt|glsoat|glffct|gloas|glimt|glagent|glft|glwt)-|GR1348941)[0-9A-Za-z_-]{20,300}(?:\.[0-9A-Za-z_-]{1,50}){0,3}`},

		// Chat.
		{typ: "slack_token", kw: []string{"xoxb-", "xoxp-", "xoxa-", "xoxo-", "xoxr-", "xoxs-", "xoxe-", "xoxe."}, cs: true, anchored: true,
			re: `xox[abposre]-\d{6,20}-[0-9A-Za-z-]{6,250}|xoxe\.xox[bp]-\d-[0-9A-Za-z]{100,250}`, check: tokenEnd("#*")},
		{typ: "slack_app_token", kw: []string{"xapp-"}, cs: true, anchored: true, re: `xapp-\d-[0-9A-Za-z-]{10,250}`},
		{typ: "slack_webhook", kw: []string{"hooks.slack.com/"}, anchored: true,
			re: `(?i)hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9+/_-]{20,200})`, group: 1},
		{typ: "discord_webhook", kw: []string{"discord.com/api/webhooks/", "discordapp.com/api/webhooks/"}, anchored: true,
			re: `(?i)discord(?:app)?\.com/api/webhooks/(\d{5,30}/[A-Za-z0-9_-]{60,68})`, group: 1},
		{typ: "telegram_bot_token", kw: []string{":AA"}, cs: true,
			re: `(\d{8,10}:AA[0-9A-Za-z_-]{33})(?:[^0-9A-Za-z_-]|$)`, group: 1, check: notAfterDigit},

		// Payments and messaging.
		{typ: "stripe_secret_key", kw: []string{"sk_live_", "sk_test_"}, cs: true, anchored: true,
			re: `sk_(?:live|test)_` + b62 + `{10,247}`, check: gluedToken(len("sk_live_"), 0)},
		{typ: "stripe_restricted_key", kw: []string{"rk_live_", "rk_test_"}, cs: true, anchored: true,
			re: `rk_(?:live|test)_` + b62 + `{10,247}`, check: gluedToken(len("rk_live_"), 0)},
		{typ: "stripe_webhook_secret", kw: []string{"whsec_"}, cs: true, anchored: true,
			re: `whsec_[0-9A-Za-z+/]{32,64}`},
		{typ: "twilio_api_key", kw: []string{"SK"}, cs: true, anchored: true, minEntropy: 3,
			re: `SK[0-9a-fA-F]{32}\b`},
		{typ: "sendgrid_api_key", kw: []string{"SG."}, cs: true, anchored: true,
			re: `SG\.[0-9A-Za-z_-]{22}\.[0-9A-Za-z_-]{43}\b`},

		// AI providers.
		{typ: "openai_api_key", kw: []string{"T3BlbkFJ"}, cs: true, before: 3 + 11 + 200, after: 200,
			re: `sk-(?:[a-z]{1,10}-)?[A-Za-z0-9_-]{20,200}T3BlbkFJ[A-Za-z0-9_-]{20,200}`},
		{typ: "openai_api_key", kw: []string{"sk-proj-", "sk-svcacct-", "sk-admin-"}, cs: true, anchored: true,
			re: `sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,250}`},
		{typ: "anthropic_api_key", kw: []string{"sk-ant-"}, cs: true, anchored: true,
			re: `sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_-]{93}AA\b`},
		{typ: "huggingface_token", kw: []string{"hf_", "api_org_"}, cs: true, anchored: true,
			re: `(?:hf|api_org)_[A-Za-z]{34}\b`},
		{typ: "groq_api_key", kw: []string{"gsk_"}, cs: true, anchored: true, re: `gsk_` + b62 + `{52}\b`},
		{typ: "xai_api_key", kw: []string{"xai-"}, cs: true, anchored: true, re: `xai-` + b62 + `{70,90}\b`},
		{typ: "replicate_api_token", kw: []string{"r8_"}, cs: true, anchored: true, re: `r8_` + b62 + `{37}\b`},
		{typ: "perplexity_api_key", kw: []string{"pplx-"}, cs: true, anchored: true, re: `pplx-` + b62 + `{48}\b`},

		// Package registries and developer platforms.
		{typ: "npm_token", kw: []string{"npm_"}, cs: true, anchored: true, re: `npm_` + b62 + `{36}\b`},
		{typ: "pypi_token", kw: []string{"pypi-AgEIcHlwaS5vcmc"}, cs: true, anchored: true,
			re: `pypi-AgEIcHlwaS5vcmc[0-9A-Za-z_-]{50,1000}`},
		{typ: "digitalocean_token", kw: []string{"dop_v1_", "doo_v1_", "dor_v1_"}, cs: true, anchored: true,
			re: `do[opr]_v1_[a-f0-9]{64}\b`},
		{typ: "vault_token", kw: []string{"hvs.", "hvb.", "hvr."}, cs: true, anchored: true,
			re: `hv[sbr]\.[0-9A-Za-z_-]{24,300}`},
		{typ: "age_secret_key", kw: []string{"AGE-SECRET-KEY-"}, cs: true, anchored: true,
			re: `AGE-SECRET-KEY-(?:PQ-)?1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58,1000}`},
		{typ: "shopify_token", kw: []string{"shpat_", "shpca_", "shppa_", "shpss_"}, cs: true, anchored: true,
			re: `shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b`},
		{typ: "databricks_token", kw: []string{"dapi"}, cs: true, anchored: true, minEntropy: 3,
			re: `dapi[a-f0-9]{32}(?:-\d)?\b`},
		{typ: "postman_api_key", kw: []string{"PMAK-"}, cs: true, anchored: true,
			re: `PMAK-[a-f0-9]{24}-[a-f0-9]{34}\b`},
		{typ: "linear_api_key", kw: []string{"lin_api_"}, cs: true, anchored: true, re: `lin_api_` + b62 + `{40}\b`},
		{typ: "grafana_token", kw: []string{"glsa_", "glc_"}, cs: true, anchored: true,
			re: `glsa_` + b62 + `{32}_[A-Fa-f0-9]{8}\b|glc_[A-Za-z0-9+/]{32,400}={0,2}`},
		{typ: "newrelic_api_key", kw: []string{"NRAK-"}, cs: true, anchored: true, re: `NRAK-[A-Z0-9]{27}\b`},
		{typ: "doppler_token", kw: []string{"dp.pt.", "dp.st.", "dp.sa.", "dp.ct.", "dp.scim.", "dp.audit."}, cs: true, anchored: true,
			re: `dp\.(?:pt|st|sa|ct|scim|audit)\.` + b62 + `{40,44}\b`},
		{typ: "pulumi_access_token", kw: []string{"pul-"}, cs: true, anchored: true, re: `pul-[a-f0-9]{40}\b`},
		{typ: "heroku_api_key", kw: []string{"HRKU-"}, cs: true, anchored: true, re: `HRKU-[0-9A-Za-z_-]{20,100}`},
		{typ: "terraform_cloud_token", kw: []string{".atlasv1."}, cs: true,
			re: `[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}`},

		// Tokens of any issuer.
		{typ: "jwt", kw: []string{"eyJ"}, cs: true, anchored: true, prio: prioJWT, after: longSpan,
			re: `eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`},

		// Private keys.
		{typ: "private_key", kw: []string{"PRIVATE KEY"}, cs: true, prio: prioKey, ext: KeyBlockCap + 64,
			re: `-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY-----`, check: keyBlock("OPENSSH")},
		{typ: "openssh_private_key", kw: []string{"OPENSSH PRIVATE KEY"}, cs: true, prio: prioKey, ext: KeyBlockCap + 64,
			re: `-----BEGIN OPENSSH PRIVATE KEY-----`, check: keyBlock("")},
		{typ: "pgp_private_key", kw: []string{"PGP PRIVATE KEY BLOCK"}, cs: true, prio: prioKey, ext: KeyBlockCap + 64,
			re: `-----BEGIN PGP PRIVATE KEY BLOCK-----`, check: keyBlock("")},
		{typ: "private_key", kw: []string{"LS0tLS1CRUdJTi"}, cs: true, anchored: true, prio: prioKey, after: longSpan,
			re: `LS0tLS1CRUdJTi[A-Za-z0-9+/]{16,}={0,2}(?:\r?\n[A-Za-z0-9+/]{20,}={0,2})*`, check: base64Key},

		// Credentials in URLs: the password only.
		// The regex finds scheme://, check reads user:password@ after it.
		{typ: "db_url_password", kw: []string{"://"}, prio: prioURL - 1, before: 40, after: 1, ext: userinfoSpan, pre: urlHasPassword,
			re: `(?i)\b(?:jdbc:)?(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|clickhouse|cockroachdb|couchdbs?|neo4j(?:\+s)?|oracle|db2|snowflake|memcached|influxdb|cassandra|nats|kafka)` +
				`(?:\+[a-z0-9]{1,12})?://`,
			check: urlPassword},
		{typ: "url_password", kw: []string{"://"}, prio: prioURL, before: 32, after: 1, ext: userinfoSpan, pre: urlHasPassword,
			re: `\b[A-Za-z][A-Za-z0-9+.-]{0,30}://`, check: urlPassword},

		// Authorization headers and bare schemes.
		{typ: "authorization_header", kw: []string{"authorization"}, anchored: true, prio: prioHeader, after: longSpan,
			re: `(?i)authorization["']?[ \t]{0,4}[:=][ \t]{0,4}["']?(?:` +
				`(?:basic|bearer|token|apikey|api-key|key|sso-key|jwt|otp|gitlab-ci-token|oauth)[ \t]{1,4}([^\s"'\x60,;]+)` +
				`|([^\s"'\x60][^\r\n"'\x60]{5,1000}))`,
			check: authHeader},
		{typ: "bearer_token", kw: []string{"bearer"}, anchored: true, prio: prioHeader, after: longSpan,
			re: `(?i)bearer[ \t]{1,4}([A-Za-z0-9._~+/-]{16,}={0,2})`, group: 1, check: credential(1)},
		{typ: "bearer_token", kw: []string{"Token"}, cs: true, anchored: true, prio: prioHeader, after: longSpan,
			re: `Token[ \t]{1,4}([A-Za-z0-9._~+/-]{20,}={0,2})`, group: 1, check: credential(1)},
		{typ: "basic_auth", kw: []string{"basic"}, anchored: true, prio: prioHeader,
			re: `(?i)basic[ \t]{1,4}([A-Za-z0-9+/]{6,1000}={0,2})(?:[^A-Za-z0-9+/=]|$)`, group: 1, check: basicCredential},

		// ~/.docker/config.json: "auth": "base64(user:password)".
		{typ: "basic_auth", kw: []string{`"auth"`}, anchored: true, prio: prioHeader,
			re: `"auth"[ \t]{0,4}:[ \t]{0,4}"([A-Za-z0-9+/]{6,1000}={0,2})"`, group: 1, check: basicCredential},
	}...)
}

// tokenEnd drops a match followed by one of the bytes of more (a token
// whose end is a placeholder: xoxp-…-####).
func tokenEnd(more string) func([]byte, []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		if m[1] < len(win) && strings.IndexByte(more, win[m[1]]) >= 0 {
			return 0, 0, false
		}
		return m[0], m[1], true
	}
}

// gluedToken: a token glued to a word (print("%3D" + key)) is redacted
// too, when its part after the n-byte prefix has both cases as a base62
// token does (tokenLike: task_test_environment is no Stripe key).
func gluedToken(n, group int) func([]byte, []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		s, e := m[2*group], m[2*group+1]
		if glued(win, m[0]) && !tokenLike(win[min(m[0]+n, e):e], alphabet{mixed: true}) {
			return 0, 0, false
		}
		return s, e, true
	}
}

// notExample drops AWS's documentation example keys (…EXAMPLE, …EXAMPLEKEY).
func notExample(group int) func([]byte, []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		s, e := m[2*group], m[2*group+1]
		if s < 0 || bytes.Contains(win[s:e], []byte("EXAMPLE")) {
			return 0, 0, false
		}
		return s, e, true
	}
}

// endBoundedBy keeps a match only when the byte after it is outside class
// (a set of ASCII ranges like `A-Za-z0-9_`). What comes before does not
// matter: a secret may be glued to a word.
func endBoundedBy(class string) func([]byte, []int) (int, int, bool) {
	var in [256]bool
	for i := 0; i < len(class); i++ {
		if i+2 < len(class) && class[i+1] == '-' {
			for c := int(class[i]); c <= int(class[i+2]); c++ {
				in[c] = true
			}
			i += 2
			continue
		}
		in[class[i]] = true
	}
	return func(win []byte, m []int) (int, int, bool) {
		if m[1] < len(win) && in[win[m[1]]] {
			return 0, 0, false
		}
		return m[0], m[1], true
	}
}

// keyBlock extends a BEGIN … PRIVATE KEY line over the key to its END line
// (searched within KeyBlockCap); without an END line, over the base64 body
// that follows. A header containing skip belongs to another rule.
func keyBlock(skip string) func([]byte, []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		if skip != "" && bytes.Contains(win[m[0]:m[1]], []byte(skip)) {
			return 0, 0, false
		}
		e := keyBlockEnd(win, m[1])
		if b64Count(win[m[1]:e]) < 32 {
			return 0, 0, false // no key in it ("-----BEGIN … KEY-----\nanything\n-----END …")
		}
		return m[0], e, true
	}
}

func keyBlockEnd(win []byte, from int) int {
	limit := min(len(win), from+KeyBlockCap)
	body := win[from:limit]
	endAt := bytes.Index(body, []byte("-----END"))
	if next := bytes.Index(body, []byte("-----BEGIN")); next >= 0 && (endAt < 0 || next < endAt) {
		endAt, limit = -1, from+next // unterminated, another block follows
	}
	if endAt >= 0 {
		e := from + endAt + len("-----END")
		j := e
		for j < len(win) && j-e < 48 && (win[j] == ' ' || 'A' <= win[j] && win[j] <= 'Z' || '0' <= win[j] && win[j] <= '9') {
			j++
		}
		if bytes.HasPrefix(win[j:], []byte("-----")) {
			return j + 5
		}
		return j
	}
	return keyBodyEnd(win, from, limit)
}

// keyBodyEnd is the end of the lines after from (up to limit) that belong
// to an unterminated key: base64 lines and "Name: value" header lines. Lines
// end at a newline or at a literal \n (keys inside JSON strings).
func keyBodyEnd(win []byte, from, limit int) int {
	e := from
	for i := from; i < limit; {
		j := i
		for j < limit && win[j] != '\n' && !(win[j] == '\\' && j+1 < limit && (win[j+1] == 'n' || win[j+1] == 'r')) {
			j++
		}
		line := bytes.TrimRight(win[i:j], "\r \t")
		if len(line) > 0 {
			if !allB64(line) && !headerLine(line) {
				break
			}
			e = i + len(line)
		}
		switch {
		case j >= limit:
			return e
		case win[j] == '\n':
			i = j + 1
		default:
			i = j + 2
		}
	}
	return e
}

// b64Count counts the base64 characters of v.
func b64Count(v []byte) int {
	n := 0
	for _, b := range v {
		if isB64(b) {
			n++
		}
	}
	return n
}

func allB64(v []byte) bool {
	for _, b := range v {
		if !isB64(b) && b != '=' {
			return false
		}
	}
	return true
}

// headerLine: "Proc-Type: 4,ENCRYPTED", "Version: GnuPG v2".
func headerLine(v []byte) bool {
	i := bytes.Index(v, []byte(": "))
	if i <= 0 || len(v) > 120 {
		return false
	}
	for _, b := range v[:i] {
		if !isLetter(b) && b != '-' {
			return false
		}
	}
	return true
}

func isB64(b byte) bool {
	return 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '+' || b == '/'
}

// base64Key keeps base64 text that starts a new token and decodes to a
// private key's BEGIN line.
func base64Key(win []byte, m []int) (int, int, bool) {
	head := win[m[0]:min(m[1], m[0]+64)]
	dec := make([]byte, base64.StdEncoding.DecodedLen(len(head)))
	n, _ := base64.StdEncoding.Decode(dec, head[:len(head)/4*4])
	if !bytes.Contains(dec[:n], []byte("PRIVATE KEY")) {
		return 0, 0, false
	}
	return m[0], m[1], true
}

// urlHasPassword: after "://" comes user:password@ before the end of the
// authority.
func urlHasPassword(win []byte, _, ke int) bool {
	colon := false
	for i := ke; i < len(win) && i < ke+400; i++ {
		switch b := win[i]; b {
		case '@':
			return colon
		case ':':
			colon = true
		case '#':
			if !colon { // a fragment; after the colon, part of the password
				return false
			}
		case '/', '?', '"', '\'', '<', '>', '`', ' ', '\t', '\r', '\n':
			return false
		}
	}
	return false
}

func isLetter(b byte) bool { return 'a' <= b|0x20 && b|0x20 <= 'z' }

// envStyle: the key at win[ks:] is upper case and directly followed by '='.
func envStyle(win []byte, ks int) bool {
	i := ks
	for i < len(win) && ('A' <= win[i] && win[i] <= 'Z' || win[i] == '_') {
		i++
	}
	return i > ks && i < len(win) && win[i] == '='
}

// authHeader: "Authorization: <scheme> <credential>" redacts the credential;
// an unknown scheme redacts the rest of the value when it looks like one.
func authHeader(win []byte, m []int) (int, int, bool) {
	if m[2] >= 0 {
		v := win[m[2]:m[3]]
		if len(v) < 6 || isPlaceholder(v) || v[0] == '<' || v[0] == '[' || v[0] == '{' {
			return 0, 0, false
		}
		return m[2], m[3], true
	}
	s, e := m[4], m[5]
	v := bytes.TrimRight(win[s:e], " \t")
	e = s + len(v)
	if len(v) < 8 || isPlaceholder(v) || entropy(v) < 3 || !hasDigit(v) {
		return 0, 0, false
	}
	return s, e, true
}

// credential: a bare "Bearer x" / "Token x" value that looks like a token.
func credential(group int) func([]byte, []int) (int, int, bool) {
	return func(win []byte, m []int) (int, int, bool) {
		s, e := m[2*group], m[2*group+1]
		v := win[s:e]
		if isPlaceholder(v) || !hasDigit(v) || !hasLetter(v) || entropy(v) < 3 {
			return 0, 0, false
		}
		return s, e, true
	}
}

// basicCredential: "Basic x" where x is base64 of "user:password".
func basicCredential(win []byte, m []int) (int, int, bool) {
	s, e := m[2], m[3]
	v := win[s:e]
	enc := base64.StdEncoding
	if len(v)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	dec, err := enc.DecodeString(string(v))
	if err != nil || !utf8.Valid(dec) {
		return 0, 0, false
	}
	i := bytes.IndexByte(dec, ':')
	if i <= 0 || i == len(dec)-1 || string(dec) == "Aladdin:open sesame" { // RFC 7617's example
		return 0, 0, false
	}
	for _, r := range string(dec) {
		if r < ' ' || r == 0x7f {
			return 0, 0, false
		}
	}
	return s, e, true
}

// notAfterDigit drops a match that starts inside a longer run of digits.
func notAfterDigit(win []byte, m []int) (int, int, bool) {
	if m[0] > 0 && '0' <= win[m[0]-1] && win[m[0]-1] <= '9' {
		return 0, 0, false
	}
	return m[2], m[3], true
}

// userinfoSpan bounds user:password@ (128 and 256 characters of at most
// 4 bytes).
const userinfoSpan = 4*(128+256) + 2

// urlPassword reads user:password@ after scheme:// (user: at most 128
// characters, none of whitespace and :/?#@"'<>`; password: 1 to 256, none
// of whitespace and :/?@"'<>`) and returns the password, unless it is a
// placeholder, shorter than 4 bytes, or the host is a documentation domain
// (example.com, *.example).
func urlPassword(win []byte, m []int) (int, int, bool) {
	i, ok := runeRun(win, m[1], 0, 128, ":/?#@\"'<>`")
	if !ok || i >= len(win) || win[i] != ':' {
		return 0, 0, false
	}
	s := i + 1
	e, ok := runeRun(win, s, 1, 256, ":/?@\"'<>`")
	if !ok || e >= len(win) || win[e] != '@' {
		return 0, 0, false
	}
	if e-s < 4 || isPlaceholder(win[s:e]) || exampleHost(win[e+1:]) {
		return 0, 0, false
	}
	return s, e, true
}

// runeRun returns the end of the run of runes from i that are neither RE2's
// \s nor in stop; ok=false when the run is shorter than lo or longer than
// hi runes.
func runeRun(win []byte, i, lo, hi int, stop string) (int, bool) {
	n := 0
	for i < len(win) {
		r, size := utf8.DecodeRune(win[i:])
		if r == ' ' || r == '\t' || r == '\n' || r == '\f' || r == '\r' || r < utf8.RuneSelf && strings.IndexByte(stop, byte(r)) >= 0 {
			break
		}
		if n++; n > hi {
			return i, false
		}
		i += size
	}
	return i, n >= lo
}

func exampleHost(rest []byte) bool {
	i := 0
	for i < len(rest) && i < 256 && (isLetter(rest[i]) || '0' <= rest[i] && rest[i] <= '9' || rest[i] == '.' || rest[i] == '-') {
		i++
	}
	h := bytes.ToLower(rest[:i])
	return bytes.HasPrefix(h, []byte("example.")) || bytes.Contains(h, []byte(".example.")) || bytes.HasSuffix(h, []byte(".example"))
}

func hasDigit(v []byte) bool {
	for _, b := range v {
		if '0' <= b && b <= '9' {
			return true
		}
	}
	return false
}

func hasLetter(v []byte) bool {
	for _, b := range v {
		if isLetter(b) {
			return true
		}
	}
	return false
}
