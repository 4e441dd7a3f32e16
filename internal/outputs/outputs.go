// Package outputs is the one place a run's outputs pass before they leave
// sandboxd for an agent: whatever the code wrote (stdout, stderr, returned
// files and their names, a session call's results and exception) is
// stripped of every secret the redactor recognises.
//
//   - Text is redacted in place ([REDACTED:<type>]).
//   - Binary content (a returned file that is not valid UTF-8, a PNG) is
//     scanned as bytes, and a PNG's text chunks (tEXt, zTXt, iTXt) are
//     decompressed and scanned too. A secret cannot be cut out of binary
//     content without damaging it, so a file holding one is withheld: it is
//     listed in skipped_files with the reason, never returned.
//   - A session call's PNG figures keep only the chunks that draw the
//     image: text and other metadata chunks are dropped before the figure
//     is scanned and returned.
//   - Strings redacts every text field of a wire response: the last net
//     for what the code controls indirectly (messages, names, reasons).
//
// Stdout and stderr are also redacted as they stream (runner's collector
// through redact.Writer, so a live stream never shows a secret); Result
// redacts them whole again, so that the text and its base64 form agree.
package outputs

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// Result redacts a run's stdout, stderr, returned files and the names of
// the files it skipped, in place, and adds what it removed to
// res.Redactions. A binary file holding a secret moves to res.Skipped.
func Result(r *redact.Redactor, res *runner.Result) redact.Counts {
	if r == nil || res == nil {
		return nil
	}
	c := redact.Counts{}
	var n redact.Counts
	res.Stdout, n = r.Bytes(res.Stdout)
	c.Add(n)
	res.Stderr, n = r.Bytes(res.Stderr)
	c.Add(n)
	res.Files, res.Skipped, n = Files(r, res.Files, res.Skipped)
	c.Add(n)
	if res.Redactions == nil {
		res.Redactions = map[string]int{}
	}
	redact.Counts(res.Redactions).Add(c)
	return c
}

// Files redacts returned files: each name, the content of a text file;
// a binary file is scanned as bytes and withheld (listed in skipped, with
// the reason) when it holds a secret. The names of skipped files are
// redacted too.
func Files(r *redact.Redactor, files []runner.OutFile, skipped []jobproto.Skipped) ([]runner.OutFile, []jobproto.Skipped, redact.Counts) {
	c := redact.Counts{}
	kept := files[:0:0]
	for _, f := range files {
		name, n := r.String(f.Path)
		c.Add(n)
		f.Path = name
		content, found, reason := Content(r, f.Content)
		c.Add(found)
		if reason != "" {
			skipped = append(skipped, jobproto.Skipped{Path: name, Reason: reason})
			continue
		}
		f.Content = content
		kept = append(kept, f)
	}
	for i := range skipped {
		var n redact.Counts
		skipped[i].Path, n = r.String(skipped[i].Path)
		c.Add(n)
		skipped[i].Reason, n = r.String(skipped[i].Reason)
		c.Add(n)
	}
	return kept, skipped, c
}

// Content redacts one file's bytes. Text (valid UTF-8) comes back
// redacted. Binary content comes back as it is when it holds no secret
// (its bytes and, for a PNG, its text chunks are scanned); when it holds
// one, reason says why it is withheld and the content must not be
// returned.
func Content(r *redact.Redactor, b []byte) (out []byte, found redact.Counts, reason string) {
	if utf8.Valid(b) {
		out, found = r.Bytes(b)
		return out, found, ""
	}
	_, found = r.Bytes(b)
	if isPNG(b) {
		texts, err := pngTexts(b)
		if err != nil {
			return nil, found, "withheld: its PNG text chunks cannot be checked for secrets: " + err.Error()
		}
		for _, t := range texts {
			_, n := r.Bytes(t)
			if found == nil && n != nil {
				found = redact.Counts{}
			}
			found.Add(n)
		}
	}
	if found.Total() > 0 {
		return nil, found, withheld(found)
	}
	return b, nil, ""
}

// withheld is the reason a binary file with secrets is not returned.
func withheld(c redact.Counts) string {
	types := make([]string, 0, len(c))
	for t := range c {
		types = append(types, t)
	}
	slices.Sort(types)
	return fmt.Sprintf("withheld: it holds a secret (%s) that cannot be removed from binary content without damaging it", strings.Join(types, ", "))
}
