package s3test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Client returns an S3 client (minio-go, the Apache-2.0 client library)
// for the server.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
	})
}

var bucketSeq atomic.Int64

// NewBucket makes an empty bucket with a fresh name and returns it.
func (s *Server) NewBucket(ctx context.Context) (string, error) {
	c, err := s.Client()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("test-%d", bucketSeq.Add(1))
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		return "", fmt.Errorf("making bucket %s: %w", name, err)
	}
	return name, nil
}

// readyCheck stores and reads back an object in a probe bucket.
func readyCheck(ctx context.Context, s *Server) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	const bucket = "sandboxd-s3test-probe"
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return err
	}
	if !ok {
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
			return err
		}
	}
	body := []byte("ready")
	if _, err := c.PutObject(ctx, bucket, "probe", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		return err
	}
	obj, err := c.GetObject(ctx, bucket, "probe", minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, body) {
		return fmt.Errorf("probe object read back as %q", got)
	}
	return nil
}
