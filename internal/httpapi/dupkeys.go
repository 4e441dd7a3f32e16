package httpapi

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sandboxd/sandboxd/api"
)

// duplicateKey returns a VALIDATION error naming the first object key of
// the JSON text raw that appears twice in its object, at any depth, or nil
// when there is none. Parsers disagree on such a body (Go's decoder keeps
// the last value, others the first), so what a reviewer or a proxy reads
// in it need not be what runs: it is refused, as RFC 8259 allows.
//
// Keys are compared as encoding/json matches them to struct fields: after
// unescaping and regardless of case, so "code", "\u0063ode" and "Code" are
// one key. Text that is not JSON gives nil: the decoder reports it.
//
// One pass of jsontext's tokenizer (values are skipped, not decoded), one
// set of keys per open object: linear in the size of the body.
func duplicateKey(raw []byte) *api.Error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var frames []jsonFrame // one per open object or array
	var name, fold []byte  // reused for each key
	for {
		switch dec.PeekKind() {
		case 0: // the end, or not JSON
			return nil
		case '{', '[':
			tok, err := dec.ReadToken()
			if err != nil {
				return nil
			}
			var f jsonFrame
			if tok.Kind() == '{' {
				f.keys = map[string]string{}
			}
			frames = append(frames, f)
		case '}', ']':
			if _, err := dec.ReadToken(); err != nil {
				return nil
			}
			frames = frames[:len(frames)-1]
		default:
			if !atName(dec) {
				if dec.SkipValue() != nil {
					return nil
				}
				continue
			}
			value, err := dec.ReadValue()
			if err != nil {
				return nil
			}
			name, _ = jsontext.AppendUnquote(name[:0], value) // invalid UTF-8 reads as U+FFFD, as encoding/json has it
			fold = appendFolded(fold[:0], name)
			top := &frames[len(frames)-1]
			if first, seen := top.keys[string(fold)]; seen {
				return duplicateError(dec, frames, first, string(name))
			}
			top.key = string(name)
			top.keys[string(fold)] = top.key
		}
	}
}

// atName reports whether the decoder's next token is the name of an
// object member: inside an object, after as many names as values.
func atName(dec *jsontext.Decoder) bool {
	kind, n := dec.StackIndex(dec.StackDepth())
	return kind == '{' && n%2 == 0
}

// jsonFrame is an open object or array of duplicateKey's scan.
type jsonFrame struct {
	keys map[string]string // objects: folded key -> the key as written; nil for arrays
	key  string            // objects: the key of the current member
}

// duplicateError names the repeated key by its path (limits.cpus,
// files[1].path, as the API names fields) and says what to change.
func duplicateError(dec *jsontext.Decoder, frames []jsonFrame, first, again string) *api.Error {
	var where strings.Builder
	for i, f := range frames[:len(frames)-1] {
		if f.keys == nil {
			_, n := dec.StackIndex(i + 1) // elements read so far: the current one is the last
			where.WriteString("[" + strconv.FormatInt(n-1, 10) + "]")
			continue
		}
		if where.Len() > 0 {
			where.WriteByte('.')
		}
		where.WriteString(f.key)
	}
	field, in := first, "the body"
	if where.Len() > 0 {
		field, in = where.String()+"."+first, where.String()
	}
	if first == again {
		return api.Validation(field, "the key %q appears twice in %s; send each key once (parsers disagree on which of the two values counts)", first, in)
	}
	return api.Validation(field, "the keys %q and %q in %s name the same field (field names are matched regardless of case); send it once, spelt %q", first, again, in, first)
}

// appendFolded appends key folded as encoding/json folds a name to match
// it to a field: ASCII letters to upper case, other runes to the least of
// their simple case folds (invalid UTF-8 to U+FFFD).
func appendFolded(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		if c := key[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += n
	}
	return dst
}

// foldRune is the least rune of r's simple case-folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
