package jobproto

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io"
)

// The launcher's frames are sealed: each carries a MAC over its sequence
// number, type and payload, keyed with Job.Key, a random key sandboxd makes
// for each run and hands over in the job frame only. The code in the
// sandbox never sees the key (it is in no file, argument or environment,
// and the launcher's memory is closed to it), so bytes it manages to write
// into the report stream — through /proc/1/fd/1 under a kernel that lets it
// open that, say — fail the check instead of passing for the launcher's.

// KeySize is the size of a run's frame key.
const KeySize = 32

// MACSize is the size of the MAC after each sealed frame's payload.
const MACSize = 16

// ErrBadMAC means a frame's MAC did not verify: the report stream was
// written by something other than the launcher.
var ErrBadMAC = errors.New("jobproto: a frame failed its MAC check; the report stream was tampered with")

// NewKey returns a fresh random frame key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	return k
}

func frameMAC(m hash.Hash, seq uint64, hdr []byte, payload []byte) []byte {
	m.Reset()
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	m.Write(s[:])
	m.Write(hdr)
	m.Write(payload)
	return m.Sum(nil)[:MACSize]
}

// SealedWriter writes sealed frames. It is not safe for concurrent use.
type SealedWriter struct {
	w   io.Writer
	mac hash.Hash
	seq uint64
}

// NewSealedWriter returns a writer of frames sealed with key.
func NewSealedWriter(w io.Writer, key []byte) *SealedWriter {
	return &SealedWriter{w: w, mac: hmac.New(sha256.New, key)}
}

// Frame writes one sealed frame in a single write.
func (s *SealedWriter) Frame(typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return errors.New("jobproto: frame exceeds the size limit")
	}
	buf := make([]byte, 5, 5+len(payload)+MACSize)
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:], uint32(len(payload)))
	buf = append(buf, payload...)
	buf = append(buf, frameMAC(s.mac, s.seq, buf[:5], payload)...)
	s.seq++
	_, err := s.w.Write(buf)
	return err
}

// SealedReader reads and verifies sealed frames.
type SealedReader struct {
	r   io.Reader
	mac hash.Hash
	seq uint64
}

// NewSealedReader returns a reader of frames sealed with key.
func NewSealedReader(r io.Reader, key []byte) *SealedReader {
	return &SealedReader{r: r, mac: hmac.New(sha256.New, key)}
}

// Next reads one frame whose payload is at most max bytes and verifies its
// MAC. It returns io.EOF only when the stream ends cleanly between frames.
func (s *SealedReader) Next(max int) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(s.r, hdr[1:]); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) || n > MaxFrame {
		return 0, nil, ErrFrameTooLarge
	}
	buf := make([]byte, int(n)+MACSize)
	if _, err := io.ReadFull(s.r, buf); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	payload, got := buf[:n], buf[n:]
	if !hmac.Equal(got, frameMAC(s.mac, s.seq, hdr[:], payload)) {
		return 0, nil, ErrBadMAC
	}
	s.seq++
	return hdr[0], payload, nil
}
