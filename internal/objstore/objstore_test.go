package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/objstore"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// testStore is the contract every Store implementation passes.
func testStore(t *testing.T, o objstore.Store) {
	ctx := context.Background()
	body := bytes.Repeat([]byte("airlock "), 1000)
	if err := o.Put(ctx, "a/b/one", bytes.NewReader(body), int64(len(body)), sum(body)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	r, err := o.Get(ctx, "a/b/one")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get read %d bytes (%v), want the %d put", len(got), err, len(body))
	}
	if in, err := o.Stat(ctx, "a/b/one"); err != nil || in.Size != int64(len(body)) || in.Modified.IsZero() {
		t.Errorf("Stat = %+v, %v; want size %d and a time", in, err, len(body))
	}

	// Content that differs from the size or digest given stores nothing.
	for _, c := range []struct {
		name string
		data []byte
		size int64
		sum  string
	}{
		{"wrong digest", body, int64(len(body)), sum([]byte("other"))},
		{"shorter", body[:10], int64(len(body)), sum(body)},
		{"longer", append(bytes.Clone(body), 'x'), int64(len(body)), sum(body)},
		{"malformed digest", body, int64(len(body)), "abc"},
	} {
		if err := o.Put(ctx, "bad", bytes.NewReader(c.data), c.size, c.sum); err == nil {
			t.Errorf("Put with %s succeeded", c.name)
		}
		if _, err := o.Stat(ctx, "bad"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("after Put with %s: Stat = %v, want ErrNotFound", c.name, err)
		}
	}
	for _, key := range []string{"", "../x", "a//b", "/a", "a/./b", "a b"} {
		if err := o.Put(ctx, key, bytes.NewReader(nil), 0, sum(nil)); err == nil {
			t.Errorf("Put under key %q succeeded", key)
		}
	}
	if _, err := o.Get(ctx, "absent"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get of an absent key = %v, want ErrNotFound", err)
	}
	if _, err := o.Stat(ctx, "absent"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat of an absent key = %v, want ErrNotFound", err)
	}
	must(t, o.Put(ctx, "a/two", strings.NewReader("2"), 1, sum([]byte("2"))))
	must(t, o.Put(ctx, "c/three", strings.NewReader("3"), 1, sum([]byte("3"))))
	if got, want := list(t, o, "a/"), []string{"a/b/one", "a/two"}; !slices.Equal(got, want) {
		t.Errorf("List(a/) = %v, want %v", got, want)
	}
	must(t, o.Delete(ctx, "a/two"))
	must(t, o.Delete(ctx, "a/two")) // absent: no error
	if got, want := list(t, o, ""), []string{"a/b/one", "c/three"}; !slices.Equal(got, want) {
		t.Errorf("List after Delete = %v, want %v", got, want)
	}
}

func list(t *testing.T, o objstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	must(t, o.List(context.Background(), prefix, func(in objstore.Info) error {
		keys = append(keys, in.Key)
		return nil
	}))
	return keys
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDir(t *testing.T) {
	o, err := objstore.OpenDir(filepath.Join(t.TempDir(), "objects"))
	must(t, err)
	testStore(t, o)
}

func TestS3(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("airlock-objects") // made by OpenS3
	cfg.Prefix = "node/"
	o, err := objstore.OpenS3(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenS3: %v", err)
	}
	testStore(t, o)

	bad := cfg
	bad.SecretKey = "wrong-secret"
	if _, err := objstore.OpenS3(context.Background(), bad); err == nil {
		t.Errorf("OpenS3 with a wrong secret key succeeded")
	} else if strings.Contains(err.Error(), "wrong-secret") {
		t.Errorf("OpenS3 error shows the secret key: %v", err)
	}
}
