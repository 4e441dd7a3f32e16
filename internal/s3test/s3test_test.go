package s3test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestServerStoresObjects starts the server, stores and reads an object
// with the S3 client, and stops it.
func TestServerStoresObjects(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	defer s.Close()
	ctx := context.Background()
	bucket, err := s.NewBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("object body "), 10000)
	if _, err := c.PutObject(ctx, bucket, "a/b", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, bucket, "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
	// Wrong credentials are refused: the server checks signatures.
	bad, _ := (&Server{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: "wrong"}).Client()
	if _, err := bad.ListBuckets(ctx); err == nil {
		t.Fatal("a wrong secret key was accepted")
	}
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s: %v", dir, err)
	}
}
