package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ObjectStore keeps the bodies of the Postgres capture store: whole
// objects under keys, written once and never rewritten (every key the
// store writes is new). Keys are relative ("c/ab/cap_ab…/0-1f2e…"): an
// implementation adds its own prefix or directory. Implementations are
// safe for concurrent use by several replicas at once.
type ObjectStore interface {
	// Put stores data under key durably: it is there, for every replica,
	// when Put returns.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the object, or an error that wraps ErrObjectNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Delete removes the object; one that is not there is no error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in no
	// particular order; an error from fn stops it and is returned.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// ObjectInfo describes a listed object.
type ObjectInfo struct {
	Key string
	// Modified is when it was written, by the object store's clock.
	Modified time.Time
	Size     int64
}

// ErrObjectNotFound: no object has the key.
var ErrObjectNotFound = errors.New("object not found")

// objectKeyPattern is what a relative key may be: no empty, "." or ".."
// segment, no leading or trailing slash.
var objectKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$`)

func checkObjectKey(key string) error {
	if !objectKeyPattern.MatchString(key) || strings.Contains(key, "..") {
		return fmt.Errorf("object key %q: use segments of A-Z, a-z, 0-9, '.', '_' and '-' joined by '/'", key)
	}
	return nil
}

// LocalObjects is an ObjectStore in a directory: each object a file at its
// key's path, written to a temporary file in .tmp, synced, renamed into
// place and its directory synced, so it is durable when Put returns and a
// crash leaves either the whole object or none (and at most a temporary
// file). For a single host with PostgreSQL, or a fleet whose replicas
// share the directory (a network file system that honours fsync and
// rename).
type LocalObjects struct {
	dir    string
	noSync bool     // tests only: no fsync
	dirs   sync.Map // directories known to be durable
}

const localTmp = ".tmp"

// NewLocalObjects opens (creating it, mode 0700) the object directory. It
// removes temporary files older than an hour (writes a crash cut short;
// younger ones may be another process's writes in progress).
func NewLocalObjects(dir string) (*LocalObjects, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	l := &LocalObjects{dir: abs}
	if err := os.MkdirAll(filepath.Join(abs, localTmp), 0o700); err != nil {
		return nil, fmt.Errorf("creating the object directory: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(abs, localTmp))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.Remove(filepath.Join(abs, localTmp, e.Name()))
		}
	}
	if err := l.syncDir(abs); err != nil {
		return nil, err
	}
	return l, nil
}

// Dir returns the directory.
func (l *LocalObjects) Dir() string { return l.dir }

func (l *LocalObjects) path(key string) (string, error) {
	if err := checkObjectKey(key); err != nil {
		return "", err
	}
	if key == localTmp || strings.HasPrefix(key, localTmp+"/") {
		return "", fmt.Errorf("object key %q is reserved", key)
	}
	return filepath.Join(l.dir, filepath.FromSlash(key)), nil
}

// Put implements ObjectStore.
func (l *LocalObjects) Put(ctx context.Context, key string, data []byte) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	parent := filepath.Dir(p)
	err = writeFile(filepath.Join(l.dir, localTmp), "obj-*", data, l.noSync, "", func(tmp string) error {
		for attempt := 0; ; attempt++ {
			if err := l.mkdirs(parent); err != nil {
				return err
			}
			err := os.Rename(tmp, p)
			if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
				return err
			}
			// Delete removed the directory, empty, meanwhile.
			l.dirs.Delete(parent)
		}
	})
	if err != nil {
		return err
	}
	return l.syncDir(parent)
}

// mkdirs makes dir and its parents under l.dir, each entry durable.
func (l *LocalObjects) mkdirs(dir string) error {
	if _, ok := l.dirs.Load(dir); ok || dir == l.dir {
		return nil
	}
	if err := l.mkdirs(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := l.syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	l.dirs.Store(dir, true)
	return nil
}

// Get implements ObjectStore.
func (l *LocalObjects) Get(ctx context.Context, key string) ([]byte, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrObjectNotFound, key)
	}
	return b, err
}

// Delete implements ObjectStore. The object's directory goes too when
// that leaves it empty (the capture store keeps a capture's objects in a
// directory of their own); directories above it stay.
func (l *LocalObjects) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	parent := filepath.Dir(p)
	if err := l.syncDir(parent); err != nil {
		return err
	}
	if parent != l.dir && os.Remove(parent) == nil {
		l.dirs.Delete(parent)
		return l.syncDir(filepath.Dir(parent))
	}
	return nil
}

// List implements ObjectStore.
func (l *LocalObjects) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	root := l.dir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = filepath.Join(l.dir, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			if p == filepath.Join(l.dir, localTmp) {
				return filepath.SkipDir
			}
			return ctx.Err()
		}
		rel, err := filepath.Rel(l.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		return fn(ObjectInfo{Key: key, Modified: fi.ModTime(), Size: fi.Size()})
	})
	return err
}

func (l *LocalObjects) syncDir(dir string) error { return syncDir(dir, l.noSync) }

// S3Config says where S3Objects keeps objects.
type S3Config struct {
	// Endpoint is the server's host[:port], without a scheme
	// ("s3.eu-west-1.amazonaws.com", "127.0.0.1:8333").
	Endpoint string
	// Secure: HTTPS (TLS) to the endpoint; false speaks plain HTTP.
	Secure bool
	// Region: "" lets the client ask the server (AWS) or take us-east-1.
	Region string
	Bucket string
	// Prefix goes before every key ("sandboxd/captures/"); "" for none.
	Prefix string
	// AccessKey and SecretKey (and SessionToken, for temporary
	// credentials) sign the requests.
	AccessKey, SecretKey, SessionToken string
	// MakeBucket creates the bucket when it does not exist; otherwise a
	// missing bucket is an error.
	MakeBucket bool
	// PathStyle addresses the bucket in the path (endpoint/bucket/key)
	// instead of the host name (bucket.endpoint/key); most self-hosted
	// servers need it.
	PathStyle bool
	// Transport, when set, carries the requests (a custom CA, a proxy).
	Transport http.RoundTripper
}

// S3Objects is an ObjectStore in a bucket of an S3-compatible server,
// through minio-go (the client library; no MinIO server is needed). An
// object is durable when the server acknowledges its PUT (S3's contract;
// a self-hosted server's own settings decide what that means on disk).
// Each PUT carries the body's MD5, so a body damaged in transit is
// refused by the server.
type S3Objects struct {
	client *minio.Client
	bucket string
	prefix string
}

// NewS3Objects connects to the server and checks (or, with MakeBucket,
// makes) the bucket.
func NewS3Objects(ctx context.Context, cfg S3Config) (*S3Objects, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("S3 capture objects: an endpoint and a bucket are needed")
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.Prefix != "" {
		if err := checkObjectKey(strings.TrimSuffix(cfg.Prefix, "/")); err != nil {
			return nil, fmt.Errorf("S3 capture objects: prefix: %w", err)
		}
	}
	opts := &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:    cfg.Secure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	}
	if cfg.PathStyle {
		opts.BucketLookup = minio.BucketLookupPath
	}
	client, err := minio.New(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("S3 capture objects: %w", err)
	}
	o := &S3Objects{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 capture objects: checking bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if ok {
		return o, nil
	}
	if !cfg.MakeBucket {
		return nil, fmt.Errorf("S3 capture objects: bucket %s does not exist at %s (make it, or let sandboxd make it)", cfg.Bucket, cfg.Endpoint)
	}
	if err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
		// Another replica may have made it meanwhile.
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
		default:
			return nil, fmt.Errorf("S3 capture objects: making bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
		}
	}
	return o, nil
}

// Put implements ObjectStore.
func (o *S3Objects) Put(ctx context.Context, key string, data []byte) error {
	if err := checkObjectKey(key); err != nil {
		return err
	}
	_, err := o.client.PutObject(ctx, o.bucket, o.prefix+key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true, DisableMultipart: true})
	if err != nil {
		return fmt.Errorf("putting object %s: %w", key, err)
	}
	return nil
}

// Get implements ObjectStore.
func (o *S3Objects) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkObjectKey(key); err != nil {
		return nil, err
	}
	obj, err := o.client.GetObject(ctx, o.bucket, o.prefix+key, minio.GetObjectOptions{})
	if err == nil {
		var b []byte
		b, err = io.ReadAll(obj)
		obj.Close()
		if err == nil {
			return b, nil
		}
	}
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return nil, fmt.Errorf("%w: %s", ErrObjectNotFound, key)
	}
	return nil, fmt.Errorf("getting object %s: %w", key, err)
}

// Delete implements ObjectStore.
func (o *S3Objects) Delete(ctx context.Context, key string) error {
	if err := checkObjectKey(key); err != nil {
		return err
	}
	err := o.client.RemoveObject(ctx, o.bucket, o.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("deleting object %s: %w", key, err)
	}
	return nil
}

// List implements ObjectStore.
func (o *S3Objects) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range o.client.ListObjects(ctx, o.bucket, minio.ListObjectsOptions{Prefix: o.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("listing objects under %s: %w", prefix, obj.Err)
		}
		key, ok := strings.CutPrefix(obj.Key, o.prefix)
		if !ok || strings.HasSuffix(key, "/") {
			continue
		}
		if err := fn(ObjectInfo{Key: key, Modified: obj.LastModified, Size: obj.Size}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// String names the bucket and prefix (for logs).
func (o *S3Objects) String() string { return "s3://" + path.Join(o.bucket, o.prefix) }

var (
	_ ObjectStore = (*LocalObjects)(nil)
	_ ObjectStore = (*S3Objects)(nil)
)
