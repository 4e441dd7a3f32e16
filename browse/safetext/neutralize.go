package safetext

import "strings"

// neutralize breaks, in text that came from a page, every sequence that
// could be taken for part of the envelope or for a chat-template token:
//
//   - `<untrusted-content` and `</untrusted-content` in any letter case,
//     with white space, `-`, `_` or `\` between the words and white space
//     around the slash, also when the `<` is written `&lt;`, `&#60;`,
//     `&#x3c;`, U+FF1C or U+FE64: the `<` becomes `[`;
//   - `<|...` and `<｜...` (ChatML, Llama 3, DeepSeek and similar special
//     tokens such as `<|im_start|>`, `<|endoftext|>`, `<|system|>`): the
//     `<` becomes `[`;
//   - `<<SYS>>` and `<</SYS>>`: the first `<` becomes `[`;
//   - role tags `<system>`, `</assistant>`, `<user>`, `<human>`,
//     `<developer>`, `<start_of_turn>`, `<end_of_turn>` and a few
//     tool-call tags: the `<` becomes `[`;
//   - `[INST]` and `[/INST]`: the `[` becomes `(`;
//   - `![` (Markdown image syntax): becomes `!\[`.
//
// The result never contains any of these sequences, and neutralize is
// idempotent.
func neutralize(s string) string {
	var b *strings.Builder
	last := 0 // s[last:i] not yet copied to b
	for i := 0; i < len(s); i++ {
		for i < len(s) && !neutralTrigger[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		var olen int // length of an opener at i
		switch c {
		case '<':
			olen = 1
		case '&':
			olen = entityLT(s[i:])
		case 0xef:
			if strings.HasPrefix(s[i:], "＜") || strings.HasPrefix(s[i:], "﹤") {
				olen = 3
			}
		case '[':
			if isInst(s[i+1:]) {
				b = flush(b, s, last, i, "(")
				last = i + 1
			}
			continue
		case '!':
			if i+1 < len(s) && s[i+1] == '[' {
				b = flush(b, s, last, i, `!\`)
				last = i + 1
			}
			continue
		default:
			continue
		}
		if olen == 0 {
			continue
		}
		if tagKind(s[i+olen:]) {
			repl := "["
			if i > 0 && s[i-1] == '!' {
				repl = `\[` // do not create "!["
			}
			b = flush(b, s, last, i, repl)
			last = i + olen
			i += olen - 1
		}
	}
	if b == nil {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// neutralTrigger marks the bytes at which neutralize has to look closer.
var neutralTrigger = [256]bool{'<': true, '&': true, 0xef: true, '[': true, '!': true}

// flush copies s[last:i] and repl to b, creating b on first use.
func flush(b *strings.Builder, s string, last, i int, repl string) *strings.Builder {
	if b == nil {
		b = new(strings.Builder)
		b.Grow(len(s) + 16)
	}
	b.WriteString(s[last:i])
	b.WriteString(repl)
	return b
}

// entityLT returns the length of a character reference for '<' at the
// start of s (`&lt;`, `&#60;`, `&#x3c;`, any case, `;` optional for &lt),
// or 0.
func entityLT(s string) int {
	for _, e := range [...]string{"&lt;", "&#60;", "&#x3c;", "&#x003c;", "&#060;", "&lt"} {
		if len(s) >= len(e) && strings.EqualFold(s[:len(e)], e) {
			return len(e)
		}
	}
	return 0
}

func isWS(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// skipWS skips white space and backslashes (Markdown escapes).
func skipWS(s string) string {
	i := 0
	for i < len(s) && (isWS(s[i]) || s[i] == '\\') {
		i++
	}
	return s[i:]
}

// word matches the lower-case ASCII word w at the start of s, in any
// letter case and ignoring backslashes (Markdown escapes, as in
// "im\_start"), and returns the rest of s.
func word(s, w string) (rest string, ok bool) {
	i := 0
	for j := 0; j < len(w); j++ {
		for i < len(s) && s[i] == '\\' {
			i++
		}
		if i == len(s) || s[i]|0x20 != w[j] && s[i] != w[j] {
			return s, false
		}
		i++
	}
	return s[i:], true
}

// roleTags are tag names that chat templates and agent frameworks use for
// turns and tool traffic.
var roleTags = [...]string{
	"system", "assistant", "user", "human", "developer",
	"start_of_turn", "end_of_turn", "im_start", "im_end",
	"function_calls", "function_results", "tool_call", "tool_result",
}

// tagKind reports whether the opener ('<' or a look-alike) before s starts
// a marker, a special token or a role tag and must be neutralised.
func tagKind(s string) bool {
	s = skipWS(s)
	if s == "" {
		return false
	}
	if s[0] == '|' || strings.HasPrefix(s, "｜") {
		return true
	}
	if s[0] == '<' {
		t := skipWS(s[1:])
		if t != "" && t[0] == '/' {
			t = skipWS(t[1:])
		}
		_, ok := word(t, "sys")
		return ok
	}
	if s[0] == '/' {
		s = skipWS(s[1:])
	}
	if t, ok := word(s, "untrusted"); ok {
		for t != "" && (isWS(t[0]) || t[0] == '-' || t[0] == '_' || t[0] == '\\') {
			t = t[1:]
		}
		_, ok := word(t, "content")
		return ok
	}
	for _, w := range roleTags {
		if t, ok := word(s, w); ok {
			t = strings.TrimLeft(t, "\\")
			if t == "" || !isAlnum(t[0]) {
				return true
			}
		}
	}
	return false
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isInst reports whether s (just after a '[') is `INST]` or `/INST]` with
// optional white space.
func isInst(s string) bool {
	s = skipWS(s)
	if s != "" && s[0] == '/' {
		s = skipWS(s[1:])
	}
	s, ok := word(s, "inst")
	if !ok {
		return false
	}
	s = skipWS(s)
	return s != "" && s[0] == ']'
}
