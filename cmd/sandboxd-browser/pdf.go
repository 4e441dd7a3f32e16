package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// readPDF extracts the text of each page with pdftotext -layout and tells
// whether the document has invisible text: qpdf --qdf writes it with its
// content streams decoded, and a text render mode of 3 (neither fill nor
// stroke) or 7 (clipping only) set in any stream counts. The check reads
// operators, not what ends up on the page: text that is invisible by other
// means (white on white, off the page, under an image, a tiny font) is not
// reported, and a stream qpdf cannot decode is not read.
func readPDF(job *jobproto.BrowserJob, out *sealed, rp *reaper, deadline time.Time) jobproto.BrowserDone {
	in := "/tmp/in.pdf"
	if err := os.WriteFile(in, job.PDF, 0o600); err != nil {
		return jobproto.BrowserDone{Error: "writing the PDF: " + err.Error(), Code: "browser"}
	}
	job.PDF = nil
	txt := "/tmp/out.txt"
	cmd := exec.Command("pdftotext", "-layout", "-enc", "UTF-8", "-eol", "unix", in, txt)
	errf, _ := os.Create("/tmp/pdftotext.err")
	cmd.Stderr = errf
	ws, killed, err := rp.run(cmd, deadline.Add(-time.Second))
	errf.Close()
	if err != nil {
		return jobproto.BrowserDone{Error: "starting pdftotext: " + err.Error(), Code: "browser"}
	}
	if killed {
		return jobproto.BrowserDone{Error: "pdftotext did not finish within the time limit", Code: "timeout"}
	}
	if ws.ExitStatus() != 0 {
		msg, _ := os.ReadFile("/tmp/pdftotext.err")
		return jobproto.BrowserDone{Error: fmt.Sprintf("pdftotext could not read the document (exit status %d): %s", ws.ExitStatus(), firstLine(msg)), Code: "pdf"}
	}
	f, err := os.Open(txt)
	if err != nil {
		return jobproto.BrowserDone{Error: "reading pdftotext's output: " + err.Error(), Code: "browser"}
	}
	text, cut, _ := readAllCapped(f, job.MaxTextBytes)
	f.Close()
	rep := jobproto.PDFReport{Truncated: cut}
	pages := strings.Split(string(text), "\f")
	if len(pages) > 1 && strings.TrimSpace(pages[len(pages)-1]) == "" && !cut {
		pages = pages[:len(pages)-1] // pdftotext ends every page with a form feed
	}
	rep.Pages = pages

	rep.InvisibleText, rep.InvisibleChecked = invisibleText(in, rp, deadline.Add(-500*time.Millisecond), out)
	if err := out.json(jobproto.TypeBrowserPDF, rep); err != nil {
		return jobproto.BrowserDone{Error: "sending the text: " + err.Error(), Code: "browser"}
	}
	return jobproto.BrowserDone{}
}

// renderModeRE finds "3 Tr" or "7 Tr" as operators in a content stream.
var renderModeRE = regexp.MustCompile(`(?:^|[\s\])>}])[37]\s+Tr(?:[\s\[(</{]|$)`)

// invisibleText decodes the document's streams with qpdf and looks for an
// invisible text render mode in them. ok is false when qpdf failed.
func invisibleText(in string, rp *reaper, deadline time.Time, out *sealed) (found, ok bool) {
	qdf := "/tmp/qdf.pdf"
	cmd := exec.Command("qpdf", "--qdf", "--object-streams=disable", "--decode-level=generalized", in, qdf)
	ws, killed, err := rp.run(cmd, deadline)
	// qpdf exits 3 when it repaired something (warnings): the output is
	// written all the same.
	if err != nil || killed || (ws.ExitStatus() != 0 && ws.ExitStatus() != 3) {
		out.note("qpdf could not decode the PDF's streams (exit %d, killed %v, %v)", ws.ExitStatus(), killed, err)
		return false, false
	}
	b, err := os.ReadFile(qdf)
	if err != nil {
		return false, false
	}
	return streamsHaveInvisibleText(b), true
}

// streamsHaveInvisibleText scans the bodies of a QDF file's streams (from
// a "stream" keyword at the end of a line to the next "endstream").
func streamsHaveInvisibleText(b []byte) bool {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte("stream"))
		if i < 0 {
			return false
		}
		i += off
		body := i + len("stream")
		off = body
		if i >= 3 && string(b[i-3:i]) == "end" {
			continue
		}
		if body >= len(b) || (b[body] != '\r' && b[body] != '\n') {
			continue
		}
		j := bytes.Index(b[body:], []byte("endstream"))
		if j < 0 {
			j = len(b) - body
		}
		if renderModeRE.Match(b[body : body+j]) {
			return true
		}
		off = body + j
	}
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
