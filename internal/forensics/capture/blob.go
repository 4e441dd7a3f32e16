package capture

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Blob files: a 6-byte header, then the payload.
//
//	"SBXC" | version 1 | flags
//	flags&flagDeflate: the payload is raw DEFLATE (RFC 1951) of the content
//	flags&flagSealed:  8-byte key fingerprint | 12-byte nonce | AES-256-GCM
//	                   ciphertext and tag; the additional data is the
//	                   header (with the fingerprint) and the blob address
//
// A content that DEFLATE does not shrink (the raw part of a gzip response)
// is stored as it is. Without flagSealed the payload follows the header.
//
// An inline part (see inlineMax) is stored in the parts.data column in
// the same format; the additional data then ends in inlineBind(capture id,
// part index) instead of a blob address, so a sealed value is only good
// in its own row: moved to another part or capture, or into a blob file,
// it fails authentication (and a blob file moved into a row fails too).
const (
	blobMagic   = "SBXC"
	blobVersion = 1
	flagDeflate = 1 << 0
	flagSealed  = 1 << 1
	headerLen   = 6
	fpLen       = 8
)

var flatePool = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

// encodeBlob returns the file content for data stored under addr.
func (k *keys) encodeBlob(data []byte, addr string) ([]byte, error) { return k.encode(data, addr) }

// encodeInline returns the parts.data value of part idx of capture id.
func (k *keys) encodeInline(data []byte, id string, idx int) ([]byte, error) {
	return k.encode(data, inlineBind(id, idx))
}

// inlineBind is what an inline part's seal is bound to. A blob address is
// 64 hex digits, so no binding of one kind is one of the other.
func inlineBind(id string, idx int) string { return "inline " + id + " " + strconv.Itoa(idx) }

// encode returns data in the blob format, sealed (with a key) under
// additional data that ends in bind.
func (k *keys) encode(data []byte, bind string) ([]byte, error) {
	var flags byte
	payload := data
	var z bytes.Buffer
	w := flatePool.Get().(*flate.Writer)
	w.Reset(&z)
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	flatePool.Put(w)
	if z.Len() < len(data) {
		payload, flags = z.Bytes(), flags|flagDeflate
	}
	if k == nil {
		out := make([]byte, 0, headerLen+len(payload))
		out = append(out, blobMagic...)
		out = append(out, blobVersion, flags)
		return append(out, payload...), nil
	}
	flags |= flagSealed
	fp, _ := hex.DecodeString(k.fingerprint)
	ns := k.aead.NonceSize()
	out := make([]byte, 0, headerLen+fpLen+ns+len(payload)+k.aead.Overhead())
	out = append(out, blobMagic...)
	out = append(out, blobVersion, flags)
	out = append(out, fp...)
	hdr := len(out)
	out = out[:hdr+ns]
	if _, err := rand.Read(out[hdr:]); err != nil {
		return nil, err
	}
	aad := append(append([]byte{}, out[:hdr]...), bind...)
	return k.aead.Seal(out, out[hdr:], payload, aad), nil
}

// decodeBlob returns the content of a blob file, checked against the
// part's size and digest.
func (k *keys) decodeBlob(file []byte, addr string, size int64, sum string) ([]byte, error) {
	return k.decode(file, "blob "+addr, addr, size, sum)
}

// decodeInline returns the content of inline part idx of capture id,
// checked against its size and digest.
func (k *keys) decodeInline(value []byte, id string, idx int, size int64, sum string) ([]byte, error) {
	return k.decode(value, fmt.Sprintf("the inline data of part %d", idx), inlineBind(id, idx), size, sum)
}

// decode undoes encode: what names the content in errors, bind is what
// its seal must be bound to.
func (k *keys) decode(file []byte, what, bind string, size int64, sum string) ([]byte, error) {
	if len(file) < headerLen || string(file[:4]) != blobMagic || file[4] != blobVersion || file[5]&^(flagDeflate|flagSealed) != 0 {
		return nil, fmt.Errorf("%w: %s has no valid header", errCorrupt, what)
	}
	flags := file[5]
	payload := file[headerLen:]
	switch {
	case flags&flagSealed != 0:
		if len(payload) < fpLen {
			return nil, fmt.Errorf("%w: %s is truncated", errCorrupt, what)
		}
		fp := hex.EncodeToString(payload[:fpLen])
		if k == nil {
			// Open refuses a store written with a key unless given it.
			return nil, fmt.Errorf("%w: %s is encrypted (key %s) in an unencrypted store", errCorrupt, what, fp)
		}
		if fp != k.fingerprint {
			return nil, fmt.Errorf("%w: %s is encrypted with key %s, not with the store's key %s (wrong key file?)", errKey, what, fp, k.fingerprint)
		}
		ns := k.aead.NonceSize()
		if len(payload) < fpLen+ns+k.aead.Overhead() {
			return nil, fmt.Errorf("%w: %s is truncated", errCorrupt, what)
		}
		hdr := headerLen + fpLen
		aad := append(append([]byte{}, file[:hdr]...), bind...)
		plain, err := k.aead.Open(nil, file[hdr:hdr+ns], file[hdr+ns:], aad)
		if err != nil {
			return nil, fmt.Errorf("%w: %s fails authentication", errCorrupt, what)
		}
		payload = plain
	case k != nil:
		return nil, fmt.Errorf("%w: %s is not encrypted in an encrypted store", errCorrupt, what)
	}
	data := payload
	if flags&flagDeflate != 0 {
		r := flate.NewReader(bytes.NewReader(payload))
		var err error
		// One byte more than expected shows a blob that inflates too far,
		// without inflating all of it.
		data, err = io.ReadAll(io.LimitReader(r, size+1))
		if err != nil {
			return nil, fmt.Errorf("%w: %s does not inflate: %v", errCorrupt, what, err)
		}
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("%w: %s holds %d bytes, the part %d", errCorrupt, what, len(data), size)
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%w: %s does not match the part's sha256", errCorrupt, what)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

const (
	blobDir = "blobs"
	tmpDir  = "tmp"
)

func validAddr(a string) bool {
	if len(a) != 64 {
		return false
	}
	for i := 0; i < len(a); i++ {
		if c := a[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (s *SQLite) blobPath(addr string) string {
	return filepath.Join(s.dir, blobDir, addr[:2], addr[2:])
}

func (s *SQLite) shardDir(addr string) string { return filepath.Join(s.dir, blobDir, addr[:2]) }

// writeBlob writes a blob atomically: a temporary file in blobs/tmp,
// written, synced and renamed to its address. The caller syncs the shard
// directory (once for all the blobs of a Put) before it commits rows that
// reference the blob.
func (s *SQLite) writeBlob(addr string, content []byte) error {
	return writeFile(filepath.Join(s.dir, blobDir, tmpDir), addr[:16]+"-*", content, s.noSync, "blob-written", func(tmp string) error {
		if _, durable := s.shards.Load(addr[:2]); !durable {
			// The shard directory's first blob (since Open): make the
			// directory if need be, and its entry durable.
			if err := os.Mkdir(s.shardDir(addr), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := s.syncDir(filepath.Join(s.dir, blobDir)); err != nil {
				return err
			}
			s.shards.Store(addr[:2], true)
		}
		return os.Rename(tmp, s.blobPath(addr))
	})
}

// readBlob reads and decodes the blob of a part.
func (s *SQLite) readBlob(addr string, size int64, sum string) ([]byte, error) {
	file, err := os.ReadFile(s.blobPath(addr))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: blob %s is missing", errCorrupt, addr)
	}
	if err != nil {
		return nil, err
	}
	return s.keys.decodeBlob(file, addr, size, sum)
}

// The blob lock orders the file operations of concurrent calls, in this
// process and in others that open the same directory: Put and Get hold it
// shared from before they look at a blob file until after they commit (or
// read) the rows that reference it; removing a blob file takes it
// exclusively and checks in the database, under the lock, that nothing
// references the blob. So no blob is removed between a Put finding (or
// writing) it and committing its reference, and no reader finds a file
// gone that its row names. Each call opens the lock file anew: flock locks
// belong to open file descriptions, so two calls of one process exclude
// each other as two processes do. In the process, s.mu is taken first: it
// prefers writers, so a stream of Puts does not keep a removal waiting.
func (s *SQLite) blobLock(exclusive bool) (func(), error) {
	if exclusive {
		s.mu.Lock()
	} else {
		s.mu.RLock()
	}
	release := func() {
		if exclusive {
			s.mu.Unlock()
		} else {
			s.mu.RUnlock()
		}
	}
	f, err := os.Open(filepath.Join(s.dir, lockFile))
	if err != nil {
		release()
		return nil, fmt.Errorf("opening the capture lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		release()
		return nil, fmt.Errorf("locking the capture lock: %w", err)
	}
	return func() {
		f.Close()
		release()
	}, nil
}

// referenced reports whether a blob row or a part names addr.
func (s *SQLite) referenced(ctx context.Context, addr string) (bool, error) {
	var n int
	err := s.rdb.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE addr = ?1) OR EXISTS (SELECT 1 FROM parts WHERE blob = ?1)`, addr).Scan(&n)
	return n != 0, err
}

// removeBlobs removes the files of blobs that a committed transaction left
// without references. Under the exclusive lock it checks again that
// nothing references each one: a Put may have taken it up since. A blob
// that is not removed (an error, a crash before this runs) is an orphan
// that GC removes.
func (s *SQLite) removeBlobs(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	unlock, err := s.blobLock(true)
	if err != nil {
		return 0, err
	}
	defer unlock()
	return s.removeLocked(ctx, addrs)
}

func (s *SQLite) removeLocked(ctx context.Context, addrs []string) (int, error) {
	n := 0
	dirs := map[string]bool{}
	var errs []error
	for _, a := range addrs {
		ref, err := s.referenced(ctx, a)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if ref {
			continue
		}
		if err := os.Remove(s.blobPath(a)); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		n++
		dirs[s.shardDir(a)] = true
	}
	for d := range dirs {
		if err := s.syncDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// GC removes blob files that no capture references (left by a crash, or by
// a failed Put or removal) and temporary files left by a crash, and wipes
// from the WAL what removals cleared in the database (wipeLog: after a
// crash, or when their own wipe found the WAL busy). It returns how many
// blob files it removed. It is safe to run at any time.
func (s *SQLite) GC(ctx context.Context) (int, error) {
	if err := s.removeTemps(); err != nil {
		return 0, err
	}
	removed := 0
	for i := 0; i < 256; i++ {
		shard := fmt.Sprintf("%02x", i)
		entries, err := os.ReadDir(filepath.Join(s.dir, blobDir, shard))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, err
		}
		var cand []string
		for _, e := range entries {
			addr := shard + e.Name()
			if !e.Type().IsRegular() || !validAddr(addr) {
				continue // not ours: leave it
			}
			ref, err := s.referenced(ctx, addr)
			if err != nil {
				return removed, err
			}
			if !ref {
				cand = append(cand, addr)
			}
		}
		n, err := s.removeBlobs(ctx, cand)
		removed += n
		if err != nil {
			return removed, err
		}
		if err := ctx.Err(); err != nil {
			return removed, err
		}
	}
	return removed, s.wipeLog(ctx)
}

// removeTemps removes the temporary files of blob writes that a crash
// interrupted. Under the exclusive lock no Put is writing one.
func (s *SQLite) removeTemps() error {
	unlock, err := s.blobLock(true)
	if err != nil {
		return err
	}
	defer unlock()
	dir := filepath.Join(s.dir, blobDir, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (s *SQLite) syncDir(dir string) error { return syncDir(dir, s.noSync) }

// hook lets tests fail (and so interrupt) an operation at a named point.
var hook = func(point string) error { return nil }
