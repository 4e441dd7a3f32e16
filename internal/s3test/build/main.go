// Command build builds the S3 test server of package s3test into its
// cache (if it is not there yet) and prints its path: run it before `go
// test` on a fresh machine so that no test binary spends its timeout on
// the build.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/internal/s3test"
)

func main() {
	start := time.Now()
	bin, err := s3test.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s (%v)\n", bin, time.Since(start).Round(time.Second))
}
