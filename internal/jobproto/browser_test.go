package jobproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func testLimits() BrowserLimits {
	return BrowserLimits{MaxStreams: 4, MaxUpBytes: 100, MaxDOM: 50, MaxShot: 20, MaxText: 30, MaxNotes: 2, MaxNoteSize: 5}
}

func sealedFrames(t testing.TB, key []byte, frames ...[2][]byte) []byte {
	var b bytes.Buffer
	w := NewSealedWriter(&b, key)
	for _, f := range frames {
		if err := w.Frame(f[0][0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func fr(typ byte, p []byte) [2][]byte { return [2][]byte{{typ}, p} }

// readAll runs a BrowserReader over a sealed stream, as the runner does.
func readAll(data, key []byte, br *BrowserReader) error {
	frames := NewSealedReader(bytes.NewReader(data), key)
	for {
		typ, p, err := frames.Next(br.Limits.MaxBrowserFrame())
		if err != nil {
			return err
		}
		done, err := br.Frame(typ, p)
		if err != nil || done {
			return err
		}
	}
}

func TestBrowserReaderAcceptsAReport(t *testing.T) {
	key := NewKey()
	var up bytes.Buffer
	opened, ended := 0, 0
	br := &BrowserReader{Limits: testLimits(), Open: func(uint32) error { opened++; return nil },
		Up: func(_ uint32, p []byte) { up.Write(p) }, UpEOF: func(uint32) { ended++ }}
	data := sealedFrames(t, key,
		fr(TypeStreamOpen, StreamFrame(1, nil)),
		fr(TypeStreamUp, StreamFrame(1, []byte("GET http://a/ HTTP/1.1\r\n"))),
		fr(TypeStreamUpEOF, StreamFrame(1, nil)),
		fr(TypeBrowserNote, []byte(`"a long note"`)),
		fr(TypeBrowserShot, []byte("\x89PNG")),
		fr(TypeBrowserPage, []byte(`{"url":"http://a/","status":200,"mime":"text/html","hidden":3,"requests":2,"load_ms":5}`)),
		fr(TypeBrowserDOM, []byte("<p>hi</p>")),
		fr(TypeBrowserDone, []byte(`{"duration_ms":9}`)),
	)
	if err := readAll(data, key, br); err != nil {
		t.Fatal(err)
	}
	r := br.Report
	if opened != 1 || ended != 1 || up.String() != "GET http://a/ HTTP/1.1\r\n" || r.Page.Hidden != 3 || string(r.DOM) != "<p>hi</p>" ||
		string(r.Shot) != "\x89PNG" || r.Done == nil || len(r.Notes) != 1 || r.Notes[0] != "a lon" {
		t.Fatalf("report: %+v", r)
	}
}

// A driver that breaks the protocol or a cap is stopped at that frame.
func TestBrowserReaderRefuses(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	cases := map[string][][2][]byte{
		"unknown type":       {fr('?', nil)},
		"short stream frame": {fr(TypeStreamOpen, []byte{1})},
		"opened twice":       {fr(TypeStreamOpen, StreamFrame(1, nil)), fr(TypeStreamOpen, StreamFrame(1, nil))},
		"data on no stream":  {fr(TypeStreamUp, StreamFrame(9, []byte("x")))},
		"data after its end": {fr(TypeStreamOpen, StreamFrame(1, nil)), fr(TypeStreamUpEOF, StreamFrame(1, nil)), fr(TypeStreamUp, StreamFrame(1, []byte("x")))},
		"too many streams": {fr(TypeStreamOpen, StreamFrame(1, nil)), fr(TypeStreamOpen, StreamFrame(2, nil)), fr(TypeStreamOpen, StreamFrame(3, nil)),
			fr(TypeStreamOpen, StreamFrame(4, nil)), fr(TypeStreamOpen, StreamFrame(5, nil))},
		"too many bytes up": {fr(TypeStreamOpen, StreamFrame(1, nil)), fr(TypeStreamUp, StreamFrame(1, big(60))), fr(TypeStreamUp, StreamFrame(1, big(41)))},
		"DOM over the cap":  {fr(TypeBrowserDOM, big(51))},
		"two DOMs":          {fr(TypeBrowserDOM, big(1)), fr(TypeBrowserDOM, big(1))},
		"shot over the cap": {fr(TypeBrowserShot, big(21))},
		"text over the cap": {fr(TypeBrowserPDF, []byte(`{"pages":["`+strings.Repeat("y", 20)+`","`+strings.Repeat("y", 11)+`"],"invisible_checked":true}`))},
		"unknown field":     {fr(TypeBrowserPage, []byte(`{"url":"x","evil":1}`))},
		"trailing JSON":     {fr(TypeBrowserDone, []byte(`{} {}`))},
		"two pages":         {fr(TypeBrowserPage, []byte(`{}`)), fr(TypeBrowserPage, []byte(`{}`))},
		"after done":        {fr(TypeBrowserDone, []byte(`{}`)), fr(TypeBrowserDOM, nil)},
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			key := NewKey()
			br := &BrowserReader{Limits: testLimits()}
			data := sealedFrames(t, key, frames...)
			err := readAll(data, key, br)
			if name == "after done" {
				// The reader stops at the last frame; a second call refuses.
				if err != nil {
					t.Fatal(err)
				}
				_, err = br.Frame(TypeBrowserDOM, nil)
			}
			if !errors.Is(err, ErrBrowserProtocol) {
				t.Fatalf("err = %v, want a protocol violation", err)
			}
		})
	}
}

// Bytes written by anything but the driver (without the key) fail.
func TestBrowserFramesAreSealed(t *testing.T) {
	data := sealedFrames(t, NewKey(), fr(TypeBrowserDone, []byte(`{}`)))
	err := readAll(data, NewKey(), &BrowserReader{Limits: testLimits()})
	if !errors.Is(err, ErrBadMAC) {
		t.Fatalf("err = %v, want ErrBadMAC", err)
	}
}

func TestStreamReadWriteDeadlineClose(t *testing.T) {
	var mu sync.Mutex
	var sent bytes.Buffer
	eofs := 0
	done := 0
	s := NewStream(7, func(id uint32, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if id != 7 || len(p) > ChunkSize {
			t.Errorf("frame of stream %d, %d bytes", id, len(p))
		}
		sent.Write(p)
		return nil
	}, func(uint32) error { eofs++; return nil }, nil, nil, func() { done++ })
	big := bytes.Repeat([]byte("a"), 3*ChunkSize+5)
	if n, err := s.Write(big); err != nil || n != len(big) || sent.Len() != len(big) {
		t.Fatalf("write: %d %v, sent %d", n, err, sent.Len())
	}
	s.Deliver([]byte("hello "))
	s.Deliver([]byte("world"))
	buf := make([]byte, 64)
	n, err := s.Read(buf)
	if err != nil || string(buf[:n]) != "hello world" {
		t.Fatalf("read: %q %v", buf[:n], err)
	}
	// A read with nothing queued ends at its deadline, as net/http needs.
	_ = s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	// A deadline in the past wakes a blocked read at once.
	_ = s.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() { _, err := s.Read(buf); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = s.SetReadDeadline(time.Unix(1, 0))
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked read: %v", err)
	}
	_ = s.SetReadDeadline(time.Time{})
	s.Deliver([]byte("x"))
	s.DeliverEOF()
	if n, err := s.Read(buf); n != 1 || err != nil {
		t.Fatalf("read before EOF: %d %v", n, err)
	}
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("read at EOF: %v", err)
	}
	_ = s.Close()
	_ = s.Close()
	if eofs != 1 || done != 1 {
		t.Fatalf("eof frames %d, done %d", eofs, done)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("write after close")
	}
}

// FuzzBrowserReader feeds the sandboxd side any sequence of sealed frames a
// hostile driver could send: it must never panic, keep every cap, and
// stop at the first violation.
func FuzzBrowserReader(f *testing.F) {
	f.Add([]byte("o\x00\x00\x00\x01u\x00\x00\x00\x01GET /c\x00\x00\x00\x01Z{}"))
	f.Add([]byte("P{\"url\":\"x\",\"status\":200}M<p>x</p>I\x89PNGT{\"pages\":[\"a\"]}Z{\"error\":\"e\"}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		key := make([]byte, KeySize)
		// Split the input into frames: a type byte, then up to the next
		// type byte from the set (a crude but productive framing).
		var frames [][2][]byte
		types := "oucPMITZN?"
		for len(in) > 0 && len(frames) < 64 {
			typ := in[0]
			in = in[1:]
			end := len(in)
			for i, c := range in {
				if strings.IndexByte(types, c) >= 0 {
					end = i
					break
				}
			}
			payload := in[:end]
			in = in[end:]
			if typ == 'o' || typ == 'u' || typ == 'c' {
				id := uint32(0)
				if len(payload) > 0 {
					id = uint32(payload[0] % 6)
				}
				var p [4]byte
				binary.BigEndian.PutUint32(p[:], id)
				payload = append(p[:], payload...)
			}
			frames = append(frames, fr(typ, payload))
		}
		lim := testLimits()
		var upBytes int64
		streams := 0
		br := &BrowserReader{Limits: lim, Open: func(uint32) error { streams++; return nil }, Up: func(_ uint32, p []byte) { upBytes += int64(len(p)) }}
		err := readAll(sealedFrames(t, key, frames...), key, br)
		if err != nil && !errors.Is(err, ErrBrowserProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("unexpected error: %v", err)
		}
		r := br.Report
		if streams > lim.MaxStreams || upBytes > lim.MaxUpBytes || int64(len(r.DOM)) > lim.MaxDOM || int64(len(r.Shot)) > lim.MaxShot || len(r.Notes) > lim.MaxNotes {
			t.Fatalf("a cap was passed: streams %d up %d dom %d shot %d notes %d", streams, upBytes, len(r.DOM), len(r.Shot), len(r.Notes))
		}
		if r.PDF != nil {
			n := 0
			for _, p := range r.PDF.Pages {
				n += len(p)
			}
			if int64(n) > lim.MaxText {
				t.Fatalf("PDF text %d over %d", n, lim.MaxText)
			}
		}
	})
}
