// Package objstore owns Airlock's access to an object store: the small contract the
// layers above use (Store), an S3 implementation for clusters, whose nodes share one
// bucket, and a directory implementation for one machine and for the tests of those
// layers.
//
// Keys are chosen by Airlock, never by a sandbox or a remote peer: slash-separated
// segments of letters, digits, '.', '_' and '-' (ValidKey). What an object holds is
// another matter: a bucket is shared by every node and anyone holding its credentials,
// so a caller treats every object it reads as hostile input and checks it (snapshot
// chunks are named by their sha256, which the reader verifies). Put checks what it
// writes against the size and digest it is given, so no node uploads a torn object.
//
// The package must not know what the objects mean (snapshots, sandboxes), and never
// logs credentials.
package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Store is an object store: a flat namespace of keys, each an immutable object.
type Store interface {
	// Put stores size bytes read from r under key, replacing any object there. It fails,
	// storing nothing, unless r gives exactly size bytes whose sha256 is sum (lowercase
	// hex).
	Put(ctx context.Context, key string, r io.Reader, size int64, sum string) error
	// Get opens the object key for reading, streamed; ErrNotFound when there is none.
	// The content is the store's word only: callers check it.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object key; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object key; an absent one is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn with every object whose key starts with prefix, in key order, and
	// stops at the first error fn returns.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// Where names the store for records and messages ("s3://bucket/prefix"), without
	// credentials.
	Where() string
}

// Info describes one object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// ErrNotFound is an object that is not there.
var ErrNotFound = fmt.Errorf("object not found: %w", errdefs.ErrNotFound)

// MaxKey is the longest key accepted.
const MaxKey = 512

// ValidKey checks that key is slash-separated segments of letters, digits, '.', '_' and
// '-', none empty, "." or "..".
func ValidKey(key string) error {
	if key == "" || len(key) > MaxKey {
		return errdefs.Invalid("object key %q must be 1 to %d bytes", key, MaxKey)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errdefs.Invalid("object key %q has an empty, \".\" or \"..\" segment", key)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return errdefs.Invalid("object key %q may hold only letters, digits, '.', '_', '-' and '/'", key)
			}
		}
	}
	return nil
}

// validPrefix accepts "" or a key prefix: a valid key, optionally followed by "/".
func validPrefix(prefix string) error {
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		return ValidKey(p)
	}
	return nil
}

// checked reads through to r and fails at the end unless it gave exactly size bytes
// hashing to sum, so an upload of the wrong content never completes.
type checked struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	size int64
	sum  string
}

func newChecked(r io.Reader, size int64, sum string) (*checked, error) {
	if size < 0 {
		return nil, errdefs.Invalid("object size %d is negative", size)
	}
	if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size || strings.ToLower(sum) != sum {
		return nil, errdefs.Invalid("object digest %q must be a sha256 in lowercase hex", sum)
	}
	c := &checked{r: io.LimitReader(r, size+1), h: sha256.New(), size: size, sum: sum}
	if size == 0 { // nothing may be read at all
		if err := c.verify(); err != nil {
			return nil, errdefs.Invalid("%v", err)
		}
	}
	return c, nil
}

// errMismatch is content that differs from what Put was told.
var errMismatch = errors.New("content does not match its size and digest")

func (c *checked) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	if c.n > c.size {
		return n, fmt.Errorf("%w: more than %d bytes", errMismatch, c.size)
	}
	// Checked on the last byte, not at EOF: a client that sends a known size stops
	// reading there.
	if n > 0 && c.n == c.size || c.size == 0 {
		if err := c.verify(); err != nil {
			return n, err
		}
	}
	if errors.Is(err, io.EOF) && c.n != c.size {
		return n, fmt.Errorf("%w: %d bytes, not %d", errMismatch, c.n, c.size)
	}
	return n, err
}

// finish checks, once the reader's consumer is done, that exactly size bytes matching
// the digest were read and that r has nothing more.
func (c *checked) finish() error {
	if c.n == c.size {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return fmt.Errorf("%w: more than %d bytes", errMismatch, c.size)
		}
	}
	if c.n != c.size {
		return fmt.Errorf("%w: %d bytes, not %d", errMismatch, c.n, c.size)
	}
	return c.verify()
}

func (c *checked) verify() error {
	if got := hex.EncodeToString(c.h.Sum(nil)); got != c.sum {
		return fmt.Errorf("%w: sha256 %s, not %s", errMismatch, got, c.sum)
	}
	return nil
}
