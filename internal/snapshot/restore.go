package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// zeroChunk is the hex digest of a full chunk (ChunkSize bytes) of zeros, restored as
// a hole; a constant, so that no process of the binary hashes a MiB at start
// (TestZeroChunk checks it).
const zeroChunk = "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58"

// Restore rebuilds snapshot id as the upper layer dstUpper (absent or an empty
// directory) for a sandbox whose ids start at uidBase. The manifest is validated and
// every chunk checked present (fetched from the object store when this node lacks it)
// before anything is written, and each chunk is hashed as it
// is copied; the layer is built in dstUpper+".tmp" and renamed into place only when
// whole, so a failure (ErrCorrupt for a bad chunk) leaves nothing behind.
func (s *Store) Restore(ctx context.Context, id string, dstUpper string, uidBase uint32) (retErr error) {
	if err := checkBase(uidBase); err != nil {
		return err
	}
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
	if err := s.checkPresent(m); err != nil {
		return err
	}
	if err := checkDest(dstUpper); err != nil {
		return err
	}
	tmp := dstUpper + ".tmp"
	if err := os.RemoveAll(tmp); err != nil { // left by a restore that crashed
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	root, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	b := &builder{s: s, m: m, root: root, base: uidBase, cacheFd: -1}
	if err := b.build(ctx); err != nil {
		return err
	}
	if err := os.Rename(tmp, dstUpper); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(dstUpper))
}

// checkDest accepts a destination that does not exist or is an empty directory.
func checkDest(dst string) error {
	st, err := os.Lstat(dst)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		d, err := os.Open(dst)
		if err != nil {
			return err
		}
		defer d.Close()
		if _, err := d.Readdirnames(1); errors.Is(err, io.EOF) {
			return nil
		}
	}
	return errdefs.Precondition("restore destination %s exists and is not an empty directory", dst)
}

// builder makes the entries of a validated manifest below root. Every directory it
// works in is reached with openat2 from root, refusing symlinks on the way.
type builder struct {
	s    *Store
	m    *Manifest
	root int
	base uint32

	cacheName string // the parent directory last opened by the sequential pass
	cacheFd   int
}

// build makes the tree in three passes: everything but hardlinks in manifest order
// (file content on `workers` goroutines), then hardlinks to the finished files, then the
// metadata of directories, deepest first, once nothing more changes inside them.
func (b *builder) build(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan *Entry, 64)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, ChunkSize+1)
			for e := range jobs {
				if ctx.Err() == nil {
					if err := b.file(e, buf); err != nil {
						cancel(err)
					}
				}
			}
		})
	}
	err := b.create(ctx, jobs)
	close(jobs)
	wg.Wait()
	b.dropCache()
	if err != nil {
		cancel(err)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := b.links(); err != nil {
		return err
	}
	return b.finishDirs()
}

func (b *builder) create(ctx context.Context, jobs chan<- *Entry) error {
	for i := 1; i < len(b.m.Entries); i++ {
		e := &b.m.Entries[i]
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.Type == TypeFile {
			select {
			case jobs <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if e.Type == TypeHardlink {
			continue
		}
		dir, name, err := b.parent(e.Path)
		if err != nil {
			return err
		}
		switch e.Type {
		case TypeDir:
			err = unix.Mkdirat(dir, name, 0o700)
		case TypeSymlink:
			err = unix.Symlinkat(e.Target, dir, name)
		case TypeWhiteout:
			err = unix.Mknodat(dir, name, unix.S_IFCHR, 0)
		case TypeFifo:
			err = unix.Mkfifoat(dir, name, 0o600)
		}
		if err == nil && e.Type != TypeDir {
			err = b.nodeMeta(dir, name, e)
		}
		if err != nil {
			return fmt.Errorf("restore %q: %w", e.Path, err)
		}
	}
	return nil
}

// keepOwners says whether restored files get their owners. Only root may give files
// away: a store used by another user (the tests of the layers above the runtime, on the
// fake runtime) keeps every file as that user's.
var keepOwners = os.Geteuid() == 0

// nodeMeta sets owner, mode, xattrs and time of a symlink, whiteout or fifo just made.
func (b *builder) nodeMeta(dir int, name string, e *Entry) error {
	if keepOwners {
		if err := unix.Fchownat(dir, name, int(b.base+e.UID), int(b.base+e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if e.Type != TypeSymlink { // not a link: chmod cannot be steered anywhere else
		if err := unix.Fchmodat(dir, name, e.Mode, 0); err != nil {
			return err
		}
	}
	p := atPath(dir, name)
	if err := setXattrs(e.Xattrs, b.base, func(n string, v []byte) error { return unix.Lsetxattr(p, n, v, 0) }); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dir, name, times(e.MTime), unix.AT_SYMLINK_NOFOLLOW)
}

// file writes one regular file: content (all-zero chunks left as holes), owner, mode
// (after chown, which clears setuid), xattrs (after chown, which clears capabilities),
// time, fsync.
func (b *builder) file(e *Entry, buf []byte) error {
	dir, err := b.openDir(path.Dir(e.Path))
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, path.Base(e.Path), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("restore %q: %w", e.Path, err)
	}
	f := os.NewFile(uintptr(fd), e.Path)
	defer f.Close()
	var off int64
	for _, c := range e.Chunks {
		h, _ := digestHex(c.Digest)
		if h != zeroChunk || c.Size != ChunkSize {
			data, err := b.s.loadChunk(b.m.ID, chunkUse{hex: h, path: e.Path, size: c.Size}, buf)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(data, off); err != nil {
				return fmt.Errorf("restore %q: %w", e.Path, err)
			}
		}
		off += c.Size
	}
	err = f.Truncate(e.Size)
	if err == nil {
		err = b.fdMeta(fd, e)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fmt.Errorf("restore %q: %w", e.Path, err)
	}
	return nil
}

// fdMeta sets owner, mode, xattrs and time of an open file or directory.
func (b *builder) fdMeta(fd int, e *Entry) error {
	if keepOwners {
		if err := unix.Fchown(fd, int(b.base+e.UID), int(b.base+e.GID)); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, e.Mode); err != nil {
		return err
	}
	if err := setXattrs(e.Xattrs, b.base, func(n string, v []byte) error { return unix.Fsetxattr(fd, n, v, 0) }); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), times(e.MTime), 0)
}

func (b *builder) links() error {
	for i := range b.m.Entries {
		e := &b.m.Entries[i]
		if e.Type != TypeHardlink {
			continue
		}
		from, err := b.openDir(path.Dir(e.Target))
		if err != nil {
			return err
		}
		to, err := b.openDir(path.Dir(e.Path))
		if err == nil {
			err = unix.Linkat(from, path.Base(e.Target), to, path.Base(e.Path), 0)
			unix.Close(to)
		}
		unix.Close(from)
		if err != nil {
			return fmt.Errorf("restore hardlink %q: %w", e.Path, err)
		}
	}
	return nil
}

// finishDirs sets directory metadata deepest first, then makes the tree durable.
func (b *builder) finishDirs() error {
	for pass := range 2 {
		for i := len(b.m.Entries) - 1; i >= 0; i-- {
			e := &b.m.Entries[i]
			if e.Type != TypeDir {
				continue
			}
			fd, err := b.openDir(e.Path)
			if err != nil {
				return err
			}
			if pass == 0 {
				err = b.fdMeta(fd, e)
			} else {
				err = unix.Fsync(fd)
			}
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("restore %q: %w", e.Path, err)
			}
		}
	}
	return nil
}

// openDir opens the directory rel below root, refusing symlinks and escapes.
func (b *builder) openDir(rel string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
	fd, err := unix.Openat2(b.root, rel, &how)
	if err != nil {
		return -1, fmt.Errorf("open %q in restored layer: %w", rel, err)
	}
	return fd, nil
}

// parent returns the (cached) directory holding p, and p's base name.
func (b *builder) parent(p string) (int, string, error) {
	dir, name := path.Dir(p), path.Base(p)
	if b.cacheFd >= 0 && b.cacheName == dir {
		return b.cacheFd, name, nil
	}
	b.dropCache()
	fd, err := b.openDir(dir)
	if err != nil {
		return -1, "", err
	}
	b.cacheName, b.cacheFd = dir, fd
	return fd, name, nil
}

func (b *builder) dropCache() {
	if b.cacheFd >= 0 {
		unix.Close(b.cacheFd)
	}
	b.cacheName, b.cacheFd = "", -1
}

func times(ns int64) []unix.Timespec {
	t := unix.NsecToTimespec(ns)
	return []unix.Timespec{t, t}
}
