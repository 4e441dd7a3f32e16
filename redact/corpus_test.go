package redact

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
)

// The fixtures are generated: every secret is random text from a seeded
// generator, glued to its provider's prefix by concatenation, so that no file
// of the repository holds anything a secret scanner would flag.

const (
	alnum  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	letter = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	hexd   = "0123456789abcdef"
	digits = "0123456789"
	b64    = alnum + "+/"
	urlb64 = alnum + "_-"
	bech32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
)

var rng = rand.New(rand.NewChaCha8([32]byte{'r', 'e', 'd', 'a', 'c', 't'}))

// rnd returns n bytes drawn from alphabet; it always holds a digit and a
// letter when the alphabet has both (so token-likeness checks apply).
func rnd(alphabet string, n int) string {
	for {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		if n < 8 || !strings.ContainsAny(alphabet, digits) || !strings.ContainsAny(alphabet, letter) ||
			strings.ContainsAny(s, digits) && strings.ContainsAny(s, letter) {
			return s
		}
	}
}

// pw is a password: letters, digits and a symbol.
func pw() string { return rnd(letter, 7) + rnd(digits, 2) + "#" + rnd(alnum, 3) }

// b64lines is n lines of 64 base64 characters.
func b64lines(n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteString(rnd(b64, 64) + "\n")
	}
	return sb.String()
}

// sample is one secret in context: Before + Secret + After, where only
// Secret is to be replaced by [REDACTED:Type].
type sample struct {
	Type, Before, Secret, After string
}

func (s sample) text() string { return s.Before + s.Secret + s.After }
func (s sample) want() string { return s.Before + "[REDACTED:" + s.Type + "]" + s.After }

func pemBlock(label string, body string) string {
	return "-----BEGIN " + label + "-----\n" + body + "-----END " + label + "-----"
}

var corpus = buildCorpus()

func buildCorpus() []sample {
	pk := " PRIVATE" + " KEY"
	jwtHead := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	jwtBody := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + rnd(digits, 10) + `","name":"Ada","iat":1516239022}`))
	pemRSA := pemBlock("RSA"+pk, b64lines(12)+rnd(b64, 20)+"==\n")
	pemPKCS8 := pemBlock(strings.TrimSpace(pk), b64lines(10))
	pemEnc := pemBlock("RSA"+pk, "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"+strings.ToUpper(rnd(hexd, 32))+"\n\n"+b64lines(8))
	pemEC := pemBlock("EC"+pk, b64lines(3))
	return []sample{
		// Cloud.
		{"aws_access_key_id", "export AWS_ACCESS_KEY_ID=", "AKIA" + rnd(upper+"234567", 16), "\n"},
		{"aws_access_key_id", `{"AccessKeyId": "`, "ASIA" + rnd(upper+"234567", 16), `", "Expiration": "2030-01-01"}`},
		{"aws_secret_access_key", "aws_secret_access_key = ", rnd(b64, 40), "\nregion = eu-west-1"},
		{"aws_secret_access_key", `"SecretAccessKey": "`, rnd(b64, 40), `",`},
		{"aws_session_token", "aws_session_token = ", "IQoJb3JpZ2luX2Vj" + rnd(b64, 300), "\n"},
		{"aws_session_token", `"SessionToken": "`, rnd(b64, 220), `"`},
		{"google_api_key", "https://maps.googleapis.com/maps/api/geocode/json?key=", "AIza" + rnd(urlb64, 35), "&address=x"},
		{"google_oauth_client_secret", `"client_secret": "`, "GOCSPX-" + rnd(urlb64, 28), `"`},
		{"google_oauth_access_token", "access: ", "ya29." + rnd(urlb64, 150), " expires 3599"},
		{"azure_storage_key", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=", rnd(b64, 86) + "==", ";EndpointSuffix=core.windows.net"},
		{"azure_sas_token", "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01&sig=", rnd(alnum, 30) + "%2B" + rnd(alnum, 12) + "%3D", " done"},
		{"azure_client_secret", "tenant ok, client credential ", rnd(alnum, 3) + "8Q~" + rnd(alnum+"_-", 34), " (expires 2030)"},

		// Code hosts.
		{"github_pat", "git clone https://github.com/o/r (auth ", "ghp_" + rnd(alnum, 36), ")"},
		{"github_oauth_token", "oauth: ", "gho_" + rnd(alnum, 36), "\n"},
		{"github_app_token", "installation token ", "ghs_" + rnd(alnum, 36), " valid 1h"},
		{"github_app_token", "user-to-server ", "ghu_" + rnd(alnum, 36), "."},
		{"github_refresh_token", "refresh ", "ghr_" + rnd(alnum, 76), "\n"},
		{"github_fine_grained_pat", "GH=", "github_pat_" + rnd(alnum, 22) + "_" + rnd(alnum, 59), "\n"},
		{"gitlab_pat", "PRIVATE-TOKEN: ", "glpat-" + rnd(urlb64, 20), "\n"},
		{"gitlab_token", "runner ", "glrt-" + rnd(urlb64, 20), " registered"},

		// Chat.
		{"slack_token", "SLACK=", "xoxb-" + rnd(digits, 12) + "-" + rnd(digits, 13) + "-" + rnd(alnum, 24), "\n"},
		{"slack_token", "user ", "xoxp-" + rnd(digits, 12) + "-" + rnd(digits, 12) + "-" + rnd(digits, 13) + "-" + rnd(hexd, 32), "."},
		{"slack_app_token", "app ", "xapp-1-A" + rnd(upper+digits, 10) + "-" + rnd(digits, 13) + "-" + rnd(hexd, 64), "\n"},
		{"slack_webhook", "curl -X POST ", "https://hooks.slack.com/services/T" + rnd(upper+digits, 8) + "/B" + rnd(upper+digits, 10) + "/" + rnd(alnum, 24), " -d @msg.json"},
		{"discord_webhook", "url = 'https://discord.com/api/webhooks/", rnd(digits, 18) + "/" + rnd(urlb64, 68), "'"},
		{"telegram_bot_token", "https://api.telegram.org/bot", rnd(digits, 10) + ":AA" + rnd(urlb64, 33), "/getMe"},

		// Payments and messaging.
		{"stripe_secret_key", "stripe.api_key = '", "sk_live_" + rnd(alnum, 99), "'"},
		{"stripe_secret_key", "test mode ", "sk_test_" + rnd(alnum, 24), "\n"},
		{"stripe_restricted_key", "restricted ", "rk_live_" + rnd(alnum, 99), "\n"},
		{"stripe_webhook_secret", "endpoint_secret = ", "whsec_" + rnd(alnum, 32), "\n"},
		{"twilio_api_key", "twilio key ", "SK" + rnd(hexd, 32), " sid AC" + rnd(hexd, 32)},
		{"sendgrid_api_key", "SENDGRID=", "SG." + rnd(urlb64, 22) + "." + rnd(urlb64, 43), "\n"},

		// AI providers.
		{"openai_api_key", "OPENAI_API_KEY=", "sk-proj-" + rnd(urlb64, 74) + "T3Blbk" + "FJ" + rnd(urlb64, 74), "\n"},
		{"openai_api_key", "legacy ", "sk-" + rnd(alnum, 20) + "T3Blbk" + "FJ" + rnd(alnum, 20), " key"},
		{"openai_api_key", "svc: ", "sk-svcacct-" + rnd(urlb64, 120), "\n"},
		{"anthropic_api_key", "x-api-key: ", "sk-ant-api03-" + rnd(urlb64, 93) + "AA", "\n"},
		{"huggingface_token", "login --token ", "hf_" + rnd(letter, 34), " --add"},
		{"groq_api_key", "GROQ=", "gsk_" + rnd(alnum, 52), "\n"},
		{"xai_api_key", "XAI=", "xai-" + rnd(alnum, 80), "\n"},
		{"replicate_api_token", "REPLICATE=", "r8_" + rnd(alnum, 37), "\n"},
		{"perplexity_api_key", "PPLX=", "pplx-" + rnd(alnum, 48), "\n"},

		// Registries and platforms.
		{"npm_token", "//registry.npmjs.org/:_authToken=", "npm_" + rnd(alnum, 36), "\n"},
		{"pypi_token", "password = ", "pypi-AgEIcHlwaS5vcmc" + rnd(urlb64, 120), "\n"},
		{"digitalocean_token", "DO=", "dop_v1_" + rnd(hexd, 64), "\n"},
		{"vault_token", "VAULT_TOKEN=", "hvs." + rnd(urlb64, 90), "\n"},
		{"age_secret_key", "# created: 2024\n", "AGE-SECRET-KEY-1" + strings.ToUpper(rnd(bech32, 58)), "\n"},
		{"shopify_token", "X-Shopify-Access-Token: ", "shpat_" + rnd(hexd, 32), "\n"},
		{"databricks_token", "DATABRICKS=", "dapi" + rnd(hexd, 32), "\n"},
		{"postman_api_key", "POSTMAN=", "PMAK-" + rnd(hexd, 24) + "-" + rnd(hexd, 34), "\n"},
		{"linear_api_key", "LINEAR=", "lin_api_" + rnd(alnum, 40), "\n"},
		{"grafana_token", "GRAFANA=", "glsa_" + rnd(alnum, 32) + "_" + rnd(hexd, 8), "\n"},
		{"newrelic_api_key", "NR=", "NRAK-" + rnd(upper+digits, 27), "\n"},
		{"doppler_token", "DOPPLER=", "dp.pt." + rnd(alnum, 43), "\n"},
		{"sentry_user_token", "SENTRY=", "sntryu_" + rnd(hexd, 64), "\n"},
		{"pulumi_access_token", "PULUMI=", "pul-" + rnd(hexd, 40), "\n"},
		{"heroku_api_key", "HEROKU=", "HRKU-AA" + rnd(urlb64, 58), "\n"},
		{"terraform_cloud_token", `credentials "app.terraform.io" { t = "`, rnd(alnum, 14) + ".atlas" + "v1." + rnd(alnum, 67), `" }`},

		// JWTs and private keys.
		{"jwt", "id_token=", "eyJ" + jwtHead[3:] + "." + jwtBody + "." + rnd(urlb64, 43), "&state=1"},
		{"private_key", "key file:\n", pemRSA, "\nend of file"},
		{"private_key", "", pemPKCS8, "\n"},
		{"private_key", "encrypted:\n", pemEnc, "\n"},
		{"private_key", "ec: ", pemEC, " (p256)"},
		{"private_key", `{"type": "service_account", "private_key": "`,
			strings.ReplaceAll(pemPKCS8, "\n", `\n`), `\n", "client_email": "x@y.iam.gserviceaccount.com"}`},
		{"private_key", "client-key-data: ", base64.StdEncoding.EncodeToString([]byte(pemEC)), "\nusers: []"},
		{"private_key", "truncated output: ", "-----BEGIN RSA" + pk + "-----\n" + strings.TrimSuffix(b64lines(4), "\n"), "\n"},
		{"openssh_private_key", "id_ed25519:\n", pemBlock("OPENSSH"+pk, b64lines(6)), "\n"},
		{"pgp_private_key", "", pemBlock("PGP"+pk+" BLOCK", "Version: GnuPG v2\n\n"+b64lines(8)+"="+rnd(b64, 4)+"\n"), "\n"},

		// URLs.
		{"db_url_password", "DATABASE_URL=postgres://app:", pw(), "@db.internal:5432/app?sslmode=require"},
		{"db_url_password", "mysql://root:", pw(), "@127.0.0.1:3306/shop"},
		{"db_url_password", "mongodb+srv://svc:", pw(), "@cluster0.abcde.mongodb.net/?retryWrites=true"},
		{"db_url_password", "REDIS_URL=redis://:", pw(), "@cache:6379/0"},
		{"db_url_password", "amqp://guest:", pw(), "@mq:5672/"},
		{"db_url_password", "engine = create_engine('postgresql+psycopg2://scott:", pw(), "@localhost/test')"},
		{"url_password", "git remote add origin https://deploy:", pw(), "@git.internal.net/team/repo.git"},
		{"url_password", "proxy=http://proxyuser:", pw(), "@10.0.0.1:3128"},

		// Headers.
		{"authorization_header", "Authorization: Bearer ", rnd(urlb64+".", 40), "\r\nAccept: */*"},
		{"authorization_header", `curl -H "Authorization: token `, rnd(alnum, 40), `" https://api`},
		{"authorization_header", `headers = {"Authorization": "Basic `, base64.StdEncoding.EncodeToString([]byte("alice:" + pw())), `"}`},
		{"authorization_header", "authorization: ", "AWS4-HMAC-SHA256 Credential=" + rnd(upper, 20) + "/20240101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + rnd(hexd, 64), "\n"},
		{"bearer_token", `requests.get(url, headers={"X-Auth": "Bearer `, rnd(alnum, 48), `"})`},
		{"bearer_token", "use header value Token ", rnd(hexd, 40), " for the API"},
		{"basic_auth", "Proxy: Basic ", base64.StdEncoding.EncodeToString([]byte("svc:" + pw())), "\n"},
		{"basic_auth", `{"auths": {"registry.internal": {"auth": "`, base64.StdEncoding.EncodeToString([]byte("ci:" + pw())), `"}}}`},

		// Assignments.
		{"password", "password=", pw(), "\n"},
		{"password", `{"user": "bob", "password": "`, pw(), `"}`},
		{"password", "DB_PASSWORD=", rnd(letter, 12), "\n"},
		{"password", "MYSQL_ROOT_PASSWORD: ", pw(), "\n"},
		{"password", "mysqladmin -u root --password ", pw(), " status"},
		{"password", "<password>", pw(), "</password>"},
		{"password", "db.pass = '", rnd(letter, 4) + " " + rnd(letter, 5) + "!", "'"},
		{"password", "passphrase: ", pw(), "\n"},
		{"generic_secret", `api_key = "`, rnd(alnum, 32), `"`},
		{"generic_secret", "SECRET_KEY=", rnd(alnum+"!@%^*", 50), "\n"},
		{"generic_secret", "  token: ", rnd(hexd, 40), "\n"},
		{"generic_secret", `"client_secret":"`, rnd(urlb64, 40), `"`},
		{"generic_secret", "X-Api-Key: ", rnd(alnum, 32), "\n"},
		{"generic_secret", "access_token=", rnd(alnum, 40), "&expires_in=3600"},
		{"generic_secret", "app --api-key ", rnd(alnum, 32), " run"},
	}
}

// lookalikes must come out unchanged.
func lookalikes() []string {
	pub := "-----BEGIN PUBLIC" + " KEY-----\n" + b64lines(5) + "-----END PUBLIC" + " KEY-----"
	cert := "-----BEGIN CERTIFICATE-----\n" + b64lines(8) + "-----END CERTIFICATE-----"
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n" + rnd(alnum+"\x00\x01\xff", 400)))
	return []string{
		"commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nAuthor: Ada <ada@example.org>",
		"git checkout " + rnd(hexd, 40) + " && git log -1 " + rnd(hexd, 12),
		"request id 123e4567-e89b-12d3-a456-426614174000 and trace_id=" + "6f1c2a4e-0b9d-4c1e-9a77-3b2f5d8e1c0a",
		`<script src="https://cdn.example.org/x.js" integrity="sha384-` + rnd(b64, 64) + `" crossorigin="anonymous"></script>`,
		`<link rel="stylesheet" integrity="sha512-` + rnd(b64, 86) + `==">`,
		"stripe publishable key pk_live_" + rnd(alnum, 24) + " and pk_test_" + rnd(alnum, 24),
		"image: ghcr.io/org/app@sha256:" + rnd(hexd, 64),
		"FROM python:3.12-slim@sha256:" + rnd(hexd, 64),
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + rnd(b64, 43) + " ada@laptop",
		"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQ" + rnd(b64, 500) + "= ada@laptop",
		pub,
		cert,
		"see https://github.com/sandboxd/sandboxd/blob/main/README.md and http://localhost:8080/exec?x=1",
		"ssh://git@github.com/org/repo.git and https://user@host.example/path and http://[::1]:8080/",
		"tokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')",
		"tokens = tokenizer.encode(text)\nmax_tokens: 4096\ntoken_type: bearer\nnum_tokens=12",
		"keyboard_layout = us\nkeymap = de-latin1-nodeadkeys",
		"Reset your password here: https://example.org/reset",
		"Forgot your password? Your password must be at least 12 characters.",
		"Password: Required.\nPassword: the one you chose at sign-up",
		"The password is stored in the keychain; the secret is safe.",
		`<img src="data:image/png;base64,` + png + `" alt="logo">`,
		"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"password=${DB_PASSWORD}",
		"password: changeme",
		"password: ********\npasswd = xxxxxxxx\npassword = <your-password>\npassword: {{ .Values.db.password }}",
		"PASSWORD=$DB_PASS\nexport PGPASSWORD=\"$PGPASS\"\npassword: %(db_password)s\npass: ${{ secrets.DB_PASS }}",
		"token: ${{ secrets.GITHUB_TOKEN }}\napi_key: YOUR_API_KEY\nsecret: <redacted>",
		"api_key = os.environ['API_KEY']\nsecret = os.getenv(\"SECRET\")\ntoken := cfg.Auth.Token",
		`password := r.FormValue("password")` + "\n" + `if token == "" {` + "\n" + `secret := []byte(os.Getenv("S"))`,
		"password = getpass.getpass()\nself.password = password\nuser.password = hashed",
		"The bearer of this letter. Basic usage. Token usage:\nauthorization: required",
		"Authorization: Bearer <token>\nAuthorization: Bearer $TOKEN\nAuthorization: Basic ${CREDS}",
		"compass = north\nbypass: true",
		"sk-1234 is not a key; neither is sk_live_ alone",
		"https://hooks.slack.com/ is the webhook host",
		"[REDACTED:password] and password=[REDACTED:password] stay as they are",
	}
}
