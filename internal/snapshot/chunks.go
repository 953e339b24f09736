package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// workers bounds the goroutines that read or write file content at once.
const workers = 4

func (s *Store) chunkPath(hexSum string) string {
	return filepath.Join(s.dir, "chunks", hexSum[:2], hexSum)
}

// digestHex returns the hex part of a "sha256:<64 lowercase hex>" digest.
func digestHex(d string) (string, bool) {
	const prefix = "sha256:"
	if len(d) != len(prefix)+64 || d[:len(prefix)] != prefix {
		return "", false
	}
	h := d[len(prefix):]
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return h, true
}

// chunkUse is one distinct chunk of a manifest and the first path that uses it.
type chunkUse struct {
	hex, path string
	size      int64
}

// chunkUses lists the distinct chunks of m in entry order. Digests were checked by
// validate or written by Create; a malformed one is skipped (and reported by validate).
func chunkUses(m *Manifest) []chunkUse {
	seen := map[string]bool{}
	var out []chunkUse
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			h, ok := digestHex(c.Digest)
			if ok && !seen[h] {
				seen[h] = true
				out = append(out, chunkUse{hex: h, path: e.Path, size: c.Size})
			}
		}
	}
	return out
}

// chunkSet lists the distinct chunk hexes of m.
func chunkSet(m *Manifest) []string {
	uses := chunkUses(m)
	out := make([]string, len(uses))
	for i, u := range uses {
		out[i] = u.hex
	}
	return out
}

// putChunk stores data under its sha256 hexSum, unless a chunk file of that size is
// already there. The content is on disk before the name appears. It reports whether it
// added a new file; a file of the wrong size is replaced (repaired), which adds none.
func (s *Store) putChunk(hexSum string, data []byte) (bool, error) {
	p := s.chunkPath(hexSum)
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == int64(len(data)) {
		return false, nil
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return false, err
	}
	repair := err == nil
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return false, err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && repair {
		err = os.Rename(f.Name(), p)
	} else if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, f.Name(), unix.AT_FDCWD, p, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) { // another writer was first
			os.Remove(f.Name())
			return false, nil
		}
	}
	if err != nil {
		os.Remove(f.Name())
		return false, err
	}
	return !repair, nil
}

// loadChunk reads chunk u into buf (of at least ChunkSize bytes) and checks it. A chunk
// that is missing, has another size or another digest is reported as corrupt.
func (s *Store) loadChunk(id string, u chunkUse, buf []byte) ([]byte, error) {
	if u.size <= 0 || u.size > ChunkSize {
		return nil, corrupt(id, "sha256:"+u.hex, u.path, fmt.Sprintf("has an impossible size %d", u.size))
	}
	f, err := os.OpenFile(s.chunkPath(u.hex), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, corrupt(id, "sha256:"+u.hex, u.path, "is missing")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := buf[:u.size]
	if _, err := io.ReadFull(f, data); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, corrupt(id, "sha256:"+u.hex, u.path, "is truncated")
	} else if err != nil {
		return nil, err
	}
	if n, _ := f.Read(buf[u.size:cap(buf)][:1]); n > 0 {
		return nil, corrupt(id, "sha256:"+u.hex, u.path, "is longer than recorded")
	}
	sum := sha256.Sum256(data)
	want, _ := hex.DecodeString(u.hex)
	if !bytes.Equal(sum[:], want) {
		return nil, corrupt(id, "sha256:"+u.hex, u.path, "does not match its digest")
	}
	return data, nil
}

// checkPresent makes sure every chunk of m is there with its size, without reading it.
func (s *Store) checkPresent(m *Manifest) error {
	for _, u := range chunkUses(m) {
		var st unix.Stat_t
		err := unix.Lstat(s.chunkPath(u.hex), &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			return corrupt(m.ID, "sha256:"+u.hex, u.path, "is missing")
		case err != nil:
			return err
		case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != u.size:
			return corrupt(m.ID, "sha256:"+u.hex, u.path, "has the wrong size")
		}
	}
	return nil
}

// Verify checks that every chunk of snapshot id exists and hashes to its digest,
// fetching from the object store those this node lacks. A bad chunk is reported with
// ErrCorrupt, naming it and a path that uses it.
func (s *Store) Verify(ctx context.Context, id string) error {
	s.gc.RLock()
	defer s.gc.RUnlock()
	m, err := s.ready(id)
	if err != nil {
		return err
	}
	if err := validate(m); err != nil {
		return err
	}
	if err := s.fetch(ctx, m); err != nil {
		return err
	}
	uses := chunkUses(m)
	return parallel(ctx, len(uses), func(ctx context.Context, i int, buf []byte) error {
		_, err := s.loadChunk(m.ID, uses[i], buf)
		return err
	})
}

// parallel runs fn(i) for i in [0, n) on up to `workers` goroutines, each with its own
// ChunkSize+1 buffer, and returns the first error; the others then stop early.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int, buf []byte) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			buf := make([]byte, ChunkSize+1)
			for i := range next {
				if ctx.Err() != nil {
					continue
				}
				if err := fn(ctx, i, buf); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}
