package main

// The caps on a session call's rich results (reprs, tables, figures), which
// come from the kernel: data from inside the sandbox like any other.

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// resultCaps applies the session's caps to a call's results.
type resultCaps struct {
	init    *jobproto.SessionInit
	figures int
	count   int
}

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// admit caps one result message of the kernel: the result to send, or
// false to drop it (a kind it does not know, or beyond the MaxFigures+4
// results a call may send). Text is cut at MaxTextBytes; a figure past
// MaxFigures, over MaxFigureBytes or not a PNG is sent without its data,
// with the reason in Omitted.
func (c *resultCaps) admit(m kmsg) (jobproto.RichResult, bool) {
	c.count++
	if c.count > c.init.MaxFigures+4 {
		return jobproto.RichResult{}, false
	}
	r := jobproto.RichResult{Kind: m.Kind, Omitted: capString(m.Omitted, 1024)}
	switch m.Kind {
	case jobproto.ResultRepr, jobproto.ResultTable:
		text := strings.ToValidUTF8(m.Text, "\uFFFD")
		r.Truncated = m.Truncated
		if int64(len(text)) > c.init.MaxTextBytes {
			text = capString(text, int(c.init.MaxTextBytes))
			r.Truncated = true
		}
		r.Text = text
	case jobproto.ResultPNG:
		c.figures++
		switch {
		case r.Omitted != "":
		case c.figures > c.init.MaxFigures:
			r.Omitted = fmt.Sprintf("the call made more than %d figures", c.init.MaxFigures)
		case int64(len(m.Data)) > c.init.MaxFigureBytes:
			r.Omitted = fmt.Sprintf("the figure is %d bytes as PNG, over the %d-byte cap", len(m.Data), c.init.MaxFigureBytes)
		case !bytes.HasPrefix(m.Data, pngMagic):
			r.Omitted = "the figure is not a PNG image"
		default:
			r.Data = m.Data
		}
	default:
		return jobproto.RichResult{}, false
	}
	return r, true
}

// capString cuts s to at most n bytes without splitting a UTF-8 sequence.
func capString(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
