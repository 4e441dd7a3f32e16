package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// captureFlags say where capture bodies go: files in the data directory
// (one host, the default), or, with a fleet's --state, an S3-compatible
// bucket (or a directory) beside the metadata in PostgreSQL.
type captureFlags struct {
	keyFile                      string
	s3Endpoint, s3Bucket         string
	s3Prefix, s3Region           string
	s3TLS, s3PathStyle, s3Create bool
	objectsDir                   string
}

func addCaptureFlags(fs *flag.FlagSet, c *captureFlags) {
	fs.StringVar(&c.keyFile, "capture-key-file", envDefault("CAPTURE_KEY_FILE", ""), "file with a 32-byte key (hex or base64, mode 0600) that encrypts captures at rest with AES-256-GCM; empty: unencrypted; the same on every replica of a fleet (env SANDBOXD_CAPTURE_KEY_FILE)")
	fs.StringVar(&c.s3Endpoint, "capture-s3-endpoint", envDefault("CAPTURE_S3_ENDPOINT", ""), "host[:port] of an S3-compatible server for capture bodies (with a postgres:// --state); credentials from SANDBOXD_CAPTURE_S3_ACCESS_KEY and SANDBOXD_CAPTURE_S3_SECRET_KEY, else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (env SANDBOXD_CAPTURE_S3_ENDPOINT)")
	fs.StringVar(&c.s3Bucket, "capture-s3-bucket", envDefault("CAPTURE_S3_BUCKET", "sandboxd"), "the bucket of capture bodies (env SANDBOXD_CAPTURE_S3_BUCKET)")
	fs.StringVar(&c.s3Prefix, "capture-s3-prefix", envDefault("CAPTURE_S3_PREFIX", "captures/"), "the key prefix of capture bodies in the bucket (env SANDBOXD_CAPTURE_S3_PREFIX)")
	fs.StringVar(&c.s3Region, "capture-s3-region", envDefault("CAPTURE_S3_REGION", ""), "the bucket's region; empty: the server's default (env SANDBOXD_CAPTURE_S3_REGION)")
	fs.BoolVar(&c.s3TLS, "capture-s3-tls", envBool("CAPTURE_S3_TLS", true), "speak HTTPS to the S3 server; false: plain HTTP, for a server on a private network only (env SANDBOXD_CAPTURE_S3_TLS)")
	fs.BoolVar(&c.s3PathStyle, "capture-s3-path-style", envBool("CAPTURE_S3_PATH_STYLE", false), "address the bucket in the path, not the host name (most self-hosted servers) (env SANDBOXD_CAPTURE_S3_PATH_STYLE)")
	fs.BoolVar(&c.s3Create, "capture-s3-make-bucket", envBool("CAPTURE_S3_MAKE_BUCKET", false), "create the bucket when it does not exist (env SANDBOXD_CAPTURE_S3_MAKE_BUCKET)")
	fs.StringVar(&c.objectsDir, "capture-objects-dir", envDefault("CAPTURE_OBJECTS_DIR", ""), "with a postgres:// --state and no S3 endpoint: the directory of capture bodies (default: captures/objects in the data dir, this replica's only) (env SANDBOXD_CAPTURE_OBJECTS_DIR)")
}

// envBool is envParsed for a boolean.
func envBool(name string, def bool) bool {
	return envParsed(name, def, func(s string) (bool, error) {
		switch s {
		case "1", "true", "yes", "on":
			return true, nil
		case "0", "false", "no", "off":
			return false, nil
		}
		return false, errors.New("not a boolean")
	}, "true or false")
}

func (c *captureFlags) check(fleet bool) error {
	if !fleet && (c.s3Endpoint != "" || c.objectsDir != "") {
		return errors.New("--capture-s3-endpoint and --capture-objects-dir go with a postgres:// --state (capture metadata in the shared database); on one host captures are files in the data dir")
	}
	if c.s3Endpoint != "" && c.s3Bucket == "" {
		return errors.New("--capture-s3-bucket must name a bucket")
	}
	return nil
}

// openCaptures opens the capture store the flags and the state name.
func openCaptures(c *captureFlags, dataDir string, state *stateBackend, log *slog.Logger) (capture.Forensics, func(), error) {
	opts := capture.Options{KeyFile: c.keyFile, Log: log}
	if state.pg == nil {
		s, err := capture.Open(filepath.Join(dataDir, "captures"), opts)
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var objects capture.ObjectStore
	if c.s3Endpoint != "" {
		access, secret := os.Getenv("SANDBOXD_CAPTURE_S3_ACCESS_KEY"), os.Getenv("SANDBOXD_CAPTURE_S3_SECRET_KEY")
		if access == "" {
			access, secret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		}
		s3, err := capture.NewS3Objects(ctx, capture.S3Config{Endpoint: c.s3Endpoint, Secure: c.s3TLS, Region: c.s3Region, Bucket: c.s3Bucket,
			Prefix: c.s3Prefix, AccessKey: access, SecretKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), MakeBucket: c.s3Create, PathStyle: c.s3PathStyle})
		if err != nil {
			return nil, nil, fmt.Errorf("the capture bucket: %w", err)
		}
		objects = s3
		log.Info("capture bodies go to S3", "endpoint", c.s3Endpoint, "bucket", c.s3Bucket, "prefix", c.s3Prefix)
	} else {
		dir := c.objectsDir
		if dir == "" {
			dir = filepath.Join(dataDir, "captures", "objects")
		}
		local, err := capture.NewLocalObjects(dir)
		if err != nil {
			return nil, nil, err
		}
		objects = local
		log.Warn("capture bodies are files of this replica only; give a fleet an S3 bucket (--capture-s3-endpoint) so that every replica reads every capture", "dir", dir)
	}
	s, err := capture.OpenPostgres(ctx, state.pg.Pool(), objects, opts)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}
