package redact_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/redact"
)

func ExampleRedactor_String() {
	// A made-up token, built by concatenation.
	text := "export GITHUB_TOKEN=ghp_" + strings.Repeat("a1B2c3D4e5F6g7H8i9", 2) + "\n" +
		"DATABASE_URL=postgres://app:" + "Tr0ub4dor&3" + "@db:5432/app\n" +
		"password: changeme\n"
	out, counts := redact.Default().String(text)
	fmt.Print(out)
	fmt.Println(counts["github_pat"], counts["db_url_password"], counts.Total())
	// Output:
	// export GITHUB_TOKEN=[REDACTED:github_pat]
	// DATABASE_URL=postgres://app:[REDACTED:db_url_password]@db:5432/app
	// password: changeme
	// 1 1 2
}

func ExampleRedactor_NewWriter() {
	w := redact.Default().NewWriter(os.Stdout)
	// The token arrives in two writes; it is still redacted whole.
	fmt.Fprint(w, "key AKIA"+"Z7QW")
	fmt.Fprint(w, "XZ2Y3LKJ4M5N please rotate\n")
	w.Close()
	fmt.Println(w.Counts())
	// Output:
	// key [REDACTED:aws_access_key_id] please rotate
	// map[aws_access_key_id:1]
}

func ExampleNew() {
	r, err := redact.New([]redact.Rule{{
		Type:        "acme_pin",
		Keywords:    []string{"acme_pin"},
		Regex:       `acme_pin=(\d{6})`,
		SecretGroup: 1,
	}})
	if err != nil {
		panic(err)
	}
	out, _ := r.String("login acme_pin=493817 ok")
	fmt.Println(out)
	_, err = redact.New([]redact.Rule{{Type: "bad", Keywords: []string{"x"}, Regex: "x("}})
	fmt.Println(err != nil)
	// Output:
	// login acme_pin=[REDACTED:acme_pin] ok
	// true
}
