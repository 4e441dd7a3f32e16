package outputs

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/sandboxd/sandboxd/redact"
)

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

func isPNG(b []byte) bool { return bytes.HasPrefix(b, pngSignature) }

// Caps on the text a PNG's chunks may inflate to: past them the file
// cannot be checked, and is withheld (a zTXt bomb stops here).
const (
	maxChunkText = 1 << 20
	maxPNGText   = 4 << 20
)

// chunk is one PNG chunk: its type and data.
type chunk struct {
	typ  string
	data []byte
}

// pngChunks splits a PNG into its chunks, checking each one's length and
// CRC; it stops at IEND.
func pngChunks(b []byte) ([]chunk, error) {
	if !isPNG(b) {
		return nil, errors.New("not a PNG")
	}
	var out []chunk
	p := len(pngSignature)
	for {
		if len(b)-p < 12 {
			return nil, errors.New("a chunk is cut short")
		}
		n := binary.BigEndian.Uint32(b[p:])
		if uint64(n) > uint64(len(b)-p-12) {
			return nil, errors.New("a chunk is longer than the file")
		}
		typ := b[p+4 : p+8]
		data := b[p+8 : p+8+int(n)]
		if crc32.ChecksumIEEE(b[p+4:p+8+int(n)]) != binary.BigEndian.Uint32(b[p+8+int(n):]) {
			return nil, fmt.Errorf("the %q chunk's CRC does not match", typ)
		}
		out = append(out, chunk{typ: string(typ), data: data})
		p += 12 + int(n)
		if string(typ) == "IEND" {
			return out, nil
		}
	}
}

// pngTexts returns the text of a PNG's tEXt, zTXt and iTXt chunks,
// compressed ones inflated, within the caps.
func pngTexts(b []byte) ([][]byte, error) {
	chunks, err := pngChunks(b)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	total := 0
	for _, c := range chunks {
		var t []byte
		switch c.typ {
		case "tEXt":
			t = c.data
		case "zTXt":
			// keyword \0 method compressed
			k := bytes.IndexByte(c.data, 0)
			if k < 0 || len(c.data) < k+2 {
				return nil, errors.New("a zTXt chunk is malformed")
			}
			if t, err = inflate(c.data[k+2:]); err != nil {
				return nil, err
			}
			t = append(append(c.data[:k:k], ' '), t...)
		case "iTXt":
			// keyword \0 flag method language \0 translated keyword \0 text
			k := bytes.IndexByte(c.data, 0)
			if k < 0 || len(c.data) < k+3 {
				return nil, errors.New("an iTXt chunk is malformed")
			}
			flag, rest := c.data[k+1], c.data[k+3:]
			l := bytes.IndexByte(rest, 0)
			if l < 0 {
				return nil, errors.New("an iTXt chunk is malformed")
			}
			tk := bytes.IndexByte(rest[l+1:], 0)
			if tk < 0 {
				return nil, errors.New("an iTXt chunk is malformed")
			}
			head := rest[:l+1+tk]
			text := rest[l+1+tk+1:]
			if flag == 1 {
				if text, err = inflate(text); err != nil {
					return nil, err
				}
			}
			t = append(append(append(c.data[:k:k], ' '), head...), append([]byte(" "), text...)...)
		default:
			continue
		}
		total += len(t)
		if total > maxPNGText {
			return nil, fmt.Errorf("its text chunks hold more than %d bytes", maxPNGText)
		}
		out = append(out, t)
	}
	return out, nil
}

// inflate decompresses a zlib stream of at most maxChunkText bytes.
func inflate(b []byte) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("a compressed text chunk is not zlib: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxChunkText+1))
	if err != nil {
		return nil, fmt.Errorf("a compressed text chunk does not inflate: %w", err)
	}
	if len(out) > maxChunkText {
		return nil, fmt.Errorf("a compressed text chunk inflates to more than %d bytes", maxChunkText)
	}
	return out, nil
}

// figureChunks are the chunks a figure keeps: those that draw the image.
// Text, time, profile and private chunks are metadata and go.
var figureChunks = map[string]bool{
	"IHDR": true, "PLTE": true, "IDAT": true, "IEND": true,
	"tRNS": true, "gAMA": true, "cHRM": true, "sRGB": true, "sBIT": true, "bKGD": true, "pHYs": true,
}

// Figure returns a session call's PNG figure with only the chunks that
// draw it, and what secrets its dropped text chunks held (counted, since
// they were in what the code produced). When the figure is no valid PNG,
// or still holds a secret in its bytes, out is nil and omitted says why.
func Figure(r *redact.Redactor, b []byte) (out []byte, found redact.Counts, omitted string) {
	chunks, err := pngChunks(b)
	if err != nil {
		return nil, nil, "the figure is not a valid PNG image"
	}
	found = redact.Counts{}
	if texts, err := pngTexts(b); err == nil {
		for _, t := range texts {
			_, n := r.Bytes(t)
			found.Add(n)
		}
	}
	var buf bytes.Buffer
	buf.Write(pngSignature)
	for _, c := range chunks {
		if !figureChunks[c.typ] {
			continue
		}
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(c.data)))
		copy(hdr[4:], c.typ)
		buf.Write(hdr[:])
		buf.Write(c.data)
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		crc.Write(c.data)
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc.Sum32())
		buf.Write(sum[:])
	}
	out = buf.Bytes()
	if _, n := r.Bytes(out); n.Total() > 0 {
		found.Add(n)
		return nil, found, withheld(n)
	}
	return out, found, ""
}
