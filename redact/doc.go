// Package redact finds secrets in text and replaces each with
// [REDACTED:<type>], counting redactions per type. Nothing sandboxd returns
// to an agent (process output, fetched pages, logs) may carry a secret.
//
// # How it works
//
// Every rule has keywords, a regular expression (Go RE2) and optional
// checks. One pass of an Aho–Corasick automaton (a DFA over byte classes,
// ASCII case folded) finds the keywords; only around a keyword occurrence
// does a rule's regex run, in a window bounded by how far the rule's matches
// can reach before and after the keyword, and a match counts only if it
// contains that occurrence. Clean text therefore costs about one table
// lookup per byte. A rule whose window is wide (a window rule, or an
// anchored one whose matches may be longer than 128 bytes) is evaluated per
// 1 KiB block of text (eval.go): occurrence by occurrence while that reads
// little, else in one pass over the windows of all its occurrences in the
// block. However dense the keywords, regexes read fewer than 70 bytes per
// byte of text (text made of one keyword repeated used to cost a window of
// up to 16 KiB per occurrence). Overlapping matches are united and named after the most
// specific rule (private keys, then provider formats, then extra rules,
// JWTs, URLs, headers, and name = value assignments last). Matches are
// confined to their windows: results depend only on the text near each
// keyword and its block, which is what makes streaming exact.
//
// # Types
//
// Cloud: aws_access_key_id (AKIA/ASIA/ABIA/ACCA + 16, not AWS's documented
// example), aws_secret_access_key (40 characters assigned to
// aws_secret_access_key / SecretAccessKey), aws_session_token,
// google_api_key (AIza), google_oauth_client_secret (GOCSPX-),
// google_oauth_access_token (ya29.), azure_storage_key (AccountKey=),
// azure_sas_token (sig=), azure_client_secret (…Q~…).
//
// Code hosts: github_pat (ghp_), github_oauth_token (gho_), github_app_token
// (ghu_, ghs_), github_refresh_token (ghr_), github_fine_grained_pat
// (github_pat_), gitlab_pat (glpat-), gitlab_token (gldt-, glrt-, glptt-, …).
//
// Chat and payments: slack_token (xoxb-, xoxp-, …), slack_app_token (xapp-),
// slack_webhook (hooks.slack.com/services/…), discord_webhook,
// telegram_bot_token, stripe_secret_key (sk_live_, sk_test_; publishable
// pk_ keys are left alone), stripe_restricted_key (rk_), stripe_webhook_secret
// (whsec_), twilio_api_key (SK + 32 hex), sendgrid_api_key (SG.).
//
// AI providers: openai_api_key (sk-proj-/sk-svcacct-/sk-admin-, or T3BlbkFJ
// inside), anthropic_api_key (sk-ant-), huggingface_token (hf_), groq_api_key
// (gsk_), xai_api_key (xai-), replicate_api_token (r8_), perplexity_api_key
// (pplx-).
//
// Platforms: npm_token (npm_), pypi_token (pypi-AgEIcHlwaS5vcmc),
// digitalocean_token (dop_v1_), vault_token (hvs.), age_secret_key
// (AGE-SECRET-KEY-1), shopify_token (shpat_), databricks_token (dapi),
// postman_api_key (PMAK-), linear_api_key (lin_api_), grafana_token (glsa_,
// glc_), newrelic_api_key (NRAK-), doppler_token (dp.pt.), pulumi_access_token (pul-), heroku_api_key (HRKU-),
// terraform_cloud_token (….atlasv1.…).
//
// Every provider rule of gitleaks' default configuration too (MIT
// licence, read as data from the configuration embedded in the
// github.com/zricethezav/gitleaks/v8 module in go.mod, so a version bump
// brings new rules; about 215 rules, 126 families): each is named after its
// gitleaks id in snake case (planetscale_password, notion_api_token,
// onepassword_secret_key, ...), keeps its keywords, expression, secret
// group, entropy threshold and allowlists, and runs anchored at its keyword
// or in a window around it. gitleaks' generic-api-key and private-key rules
// are replaced by sandboxd's; where a sandboxd rule and a gitleaks rule
// match the same secret, it is redacted once, under sandboxd's name.
//
// Glued tokens (glue.go): a token printed glued to what comes before it (a
// letter, a digit, "_", the "%3D" of a URL-encoded query:
// print("%3D" + token)) is redacted in full. sandboxd's rules with a
// literal prefix ignore what precedes it, and a gitleaks rule's \b before a
// distinctive literal prefix (sk_live_, AIza, hvs., glpat-, A3-, cmVmd, ...)
// does not apply. Prefixes that turn up inside words, hashes and base64
// keep it: s., ey, EAAA, EAAC, EAAM, ACCA, 4b1d. The part of a glued token
// after its prefix must have both cases when its alphabet has both (so
// task_test_environment is no Stripe key), or a digit when the alphabet
// has digits and one case.
//
// Any issuer: jwt (eyJ….….…); private_key (PEM "BEGIN … PRIVATE KEY"
// blocks, also JSON-escaped and base64-encoded as in kubeconfig files),
// openssh_private_key, pgp_private_key; authorization_header (the credential
// of an Authorization header, any scheme), bearer_token (bare "Bearer x",
// "Token x"), basic_auth (bare "Basic base64(user:password)", and "auth" entries of
// Docker's config.json);
// db_url_password (postgres, mysql, mongodb(+srv), redis, amqp, … URLs) and
// url_password (any other scheme://user:password@): the password only;
// password and generic_secret: a value assigned to a name that says it
// holds a secret, read by the assignment rule (assign.go): the name is
// split into parts (some_api_token_123, mySecretString, X-Api-Key) and
// names a password (password, passwd, pwd, passphrase, ...pass) or another
// secret (secret, token, creds, auth, apikey, key after api/access/private/
// client/...), unless a part makes it something else (public, id, name,
// url, file, length, hash, ...). Separators: = := ::= :::= ?= .= += => :,
// a type between (var x string =, let x: &str =), <name>value</name> also
// across lines, --name value, f("NAME", "value"). A quoted value is
// redacted whole whatever its length.
//
// The assignment and URL rules skip placeholders and references: password,
// changeme, runs of * or x, <...>, ${VAR}, $VAR, {{...}}, %(name)s,
// ENV_VAR_NAMES, values containing example/sample/dummy/placeholder/your_,
// values cut short with "...", expressions (calls, indexing, dotted names),
// variables named like credentials, documentation hosts (example.com), and
// already redacted text (redacting twice changes nothing). generic_secret
// values also need gitleaks' entropy (over 3.5), a digit or a symbol, and
// pass gitleaks' allowlists for its generic rule. Provider tokens that are
// placeholders (ghp_xxxx…, AKIAXXXX…, runs of one character, low entropy)
// are left, and so are values on gitleaks' allowlists (public Google keys).
//
// Extra rules (Rule, e.g. from an exec profile) are added with New; each
// needs a type, keywords and a regex, and may redact only a capture group
// (secret_group) or require a minimum entropy (min_entropy).
//
// # Streaming
//
// Writer redacts a stream as it is written, with the same result as
// Redactor.Bytes on the whole stream whatever the write boundaries. It holds
// back text that could still become part of a secret, never more than
// Redactor.HoldBack bytes: for the built-in rules about 20 KB, set by the
// longest reach after a keyword (16 KiB: KeyBlockCap for private key blocks
// searched for their END line, and long tokens) plus the 1 KiB block of a
// rule that runs per block; an extra rule adds up to 2*MaxRuleSpan plus
// its keyword and a block. Text that cannot be part of a secret is written
// at once; after a keyword, text waits for that keyword's rules' reach
// (and block) to be complete. Limits: a private key block is redacted up to
// KeyBlockCap after its BEGIN line (a longer one only that far); JWTs,
// bearer credentials and base64-encoded keys up to 16 KiB; a chain of
// overlapping secrets longer than 1 MiB is cut (each part still redacted).
//
// NewHandler wraps a slog.Handler so that log messages and attribute values
// are redacted too.
package redact
