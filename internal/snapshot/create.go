package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Create snapshots the upper layer upperDir, whose ids are host ids of the range that
// starts at uidBase. From meta it takes ID (empty: a fresh one), SandboxID, ImageDigest, Parent, Consistency and
// Labels. The manifest is recorded "creating" first and "ready" once every chunk is on
// disk (and, with an object store, its chunks and then its manifest are there too); on error it is left "failed" and the chunks it added are removed. The layer must
// not change meanwhile (the sandbox is frozen or stopped).
func (s *Store) Create(ctx context.Context, upperDir string, uidBase uint32, meta Manifest) (*Manifest, error) {
	if meta.SandboxID == "" {
		return nil, errdefs.Invalid("a snapshot needs a sandbox id")
	}
	id := meta.ID
	if id == "" {
		id = newID()
	} else if !validID(id) {
		return nil, errdefs.Invalid("snapshot id %q is not one NewID makes", id)
	}
	if meta.Consistency != CrashConsistent && meta.Consistency != Stopped {
		return nil, errdefs.Invalid("snapshot consistency must be %q or %q, not %q", CrashConsistent, Stopped, meta.Consistency)
	}
	if err := checkBase(uidBase); err != nil {
		return nil, err
	}
	rootfd, err := unix.Open(upperDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open upper layer: %w", err)
	}
	defer unix.Close(rootfd)

	m := &Manifest{
		ID: id, SandboxID: meta.SandboxID, ImageDigest: meta.ImageDigest, Parent: meta.Parent,
		Consistency: meta.Consistency, State: StateCreating, Created: time.Now().UTC(),
		Labels: cloneLabels(meta.Labels), Memory: meta.Memory,
	}
	s.gc.RLock()
	if err := s.writeManifest(m); err != nil {
		s.gc.RUnlock()
		return nil, err
	}
	s.setHead(m)
	w := &walker{s: s, root: rootfd, base: uidBase, links: map[uint64]string{}, touched: map[string]bool{}}
	err = w.run(ctx)
	if err == nil {
		err = w.syncTouched()
	}
	if err == nil {
		m.Entries = make([]Entry, len(w.entries))
		for i, e := range w.entries {
			m.Entries[i] = *e
			if e.Type == TypeFile {
				m.LogicalSize += e.Size
			}
		}
		m.StoredSize = w.stored
		m.State = StateReady
		if s.objs != nil {
			err = s.upload(ctx, m)
		}
		if err == nil {
			err = s.writeManifest(m)
		}
		if err == nil {
			s.addRefs(m)
		}
	}
	s.gc.RUnlock()
	if err != nil {
		s.fail(m, w.added)
		return nil, err
	}
	s.setHead(m)
	return m, nil
}

// fail records m as failed and removes the chunks it added that nothing else uses.
func (s *Store) fail(m *Manifest, added []string) {
	m.State, m.Entries, m.LogicalSize, m.StoredSize = StateFailed, nil, 0, 0
	s.writeManifest(m) // if this fails too, Open finds it "creating" and fails it
	s.setHead(m)
	s.collect(added)
}

// walker reads one upper layer: a single goroutine walks the tree (metadata only) while
// up to `workers` goroutines read, hash and store file content.
type walker struct {
	s    *Store
	root int
	base uint32
	dev  uint64

	entries []*Entry
	links   map[uint64]string // inode -> first path, for regular files with more than one link
	jobs    chan fileJob

	mu      sync.Mutex
	added   []string // chunk hexes this Create wrote
	stored  int64
	seen    sync.Map        // chunk hexes already handled by this Create
	touched map[string]bool // chunk directories with new names, to fsync
}

type fileJob struct {
	e   *Entry
	ino uint64
}

func (w *walker) run(ctx context.Context) error {
	var st unix.Stat_t
	if err := unix.Fstat(w.root, &st); err != nil {
		return err
	}
	w.dev = st.Dev
	rootEntry := w.entry(".", &st, TypeDir)
	x, err := fdXattrs(w.root)
	if err != nil {
		return err
	}
	rootEntry.Xattrs = nativeXattrs(x, w.base)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.jobs = make(chan fileJob, 64)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, ChunkSize)
			for j := range w.jobs {
				if ctx.Err() == nil {
					if err := w.readFile(ctx, j, buf); err != nil {
						cancel(err)
					}
				}
			}
		})
	}
	// The root descriptor stays the caller's; the walk works on a duplicate.
	dup, err := unix.FcntlInt(uintptr(w.root), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = w.walkDir(ctx, dup, ".")
	}
	close(w.jobs)
	wg.Wait()
	if err != nil {
		cancel(err)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// entry appends the entry for path with the metadata of st.
func (w *walker) entry(p string, st *unix.Stat_t, t EntryType) *Entry {
	fallback := uint32(overflowID)
	if t == TypeWhiteout {
		fallback = 0 // overlayfs makes whiteouts with the mounter's ids; nobody sees them
	}
	e := &Entry{
		Path: p, Type: t, Mode: st.Mode & 0o7777,
		UID: w.native(st.Uid, fallback), GID: w.native(st.Gid, fallback),
		MTime: st.Mtim.Nano(),
	}
	w.entries = append(w.entries, e)
	return e
}

func (w *walker) native(id, fallback uint32) uint32 {
	if id >= w.base && id-w.base < idRange {
		return id - w.base
	}
	return fallback
}

// walkDir records the children of the directory dirfd (at rel), in name order, and
// closes dirfd. Subdirectories are opened from dirfd with O_NOFOLLOW.
func (w *walker) walkDir(ctx context.Context, dirfd int, rel string) error {
	dir := os.NewFile(uintptr(dirfd), rel)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %q in upper layer: %w", p, err)
		}
		if st.Dev != w.dev {
			return errdefs.Precondition("upper layer has a mount at %q", p)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := w.dir(ctx, dirfd, name, p, &st); err != nil {
				return err
			}
		case unix.S_IFREG:
			if first, ok := w.links[st.Ino]; ok {
				w.entry(p, &st, TypeHardlink).Target = first
				continue
			}
			if st.Nlink > 1 {
				w.links[st.Ino] = p
			}
			select {
			case w.jobs <- fileJob{e: w.entry(p, &st, TypeFile), ino: st.Ino}:
			case <-ctx.Done():
				return ctx.Err()
			}
		case unix.S_IFLNK:
			if err := w.symlink(dirfd, name, p, &st); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFIFO:
			t := TypeFifo
			if st.Mode&unix.S_IFMT == unix.S_IFCHR {
				if st.Rdev != 0 {
					continue // only whiteouts are kept of device nodes
				}
				t = TypeWhiteout
			}
			e := w.entry(p, &st, t)
			x, err := atXattrs(dirfd, name)
			if err != nil {
				return fmt.Errorf("xattrs of %q: %w", p, err)
			}
			e.Xattrs = nativeXattrs(x, w.base)
		}
	}
	return nil
}

func (w *walker) dir(ctx context.Context, dirfd int, name, p string, st *unix.Stat_t) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q in upper layer: %w", p, err)
	}
	x, err := fdXattrs(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("xattrs of %q: %w", p, err)
	}
	w.entry(p, st, TypeDir).Xattrs = nativeXattrs(x, w.base)
	return w.walkDir(ctx, fd, p)
}

func (w *walker) symlink(dirfd int, name, p string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax+1)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return fmt.Errorf("readlink %q in upper layer: %w", p, err)
	}
	if n == 0 || n > unix.PathMax {
		return errdefs.Precondition("upper layer symlink %q has a malformed target", p)
	}
	x, err := atXattrs(dirfd, name)
	if err != nil {
		return fmt.Errorf("xattrs of %q: %w", p, err)
	}
	e := w.entry(p, st, TypeSymlink)
	e.Target, e.Xattrs = string(buf[:n]), nativeXattrs(x, w.base)
	return nil
}

// readFile stores the content of one regular file, opened again from the root without
// following any symlink, and checks it is still the inode the walk saw.
func (w *walker) readFile(ctx context.Context, j fileJob, buf []byte) error {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOATIME, Resolve: resolveFlags}
	fd, err := unix.Openat2(w.root, j.e.Path, &how)
	if errors.Is(err, unix.EPERM) { // O_NOATIME needs CAP_FOWNER
		how.Flags &^= unix.O_NOATIME
		fd, err = unix.Openat2(w.root, j.e.Path, &how)
	}
	if err != nil {
		return fmt.Errorf("open %q in upper layer: %w", j.e.Path, err)
	}
	f := os.NewFile(uintptr(fd), j.e.Path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Ino != j.ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errdefs.Precondition("upper layer changed while the snapshot was taken (%q)", j.e.Path)
	}
	x, err := fdXattrs(fd)
	if err != nil {
		return fmt.Errorf("xattrs of %q: %w", j.e.Path, err)
	}
	j.e.Xattrs = nativeXattrs(x, w.base)
	for off := int64(0); off < st.Size; off += ChunkSize {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(ChunkSize, st.Size-off)
		var c Chunk
		if n == ChunkSize && isHole(fd, off) {
			c, err = w.putZero()
		} else if _, err = f.ReadAt(buf[:n], off); err == nil {
			c, err = w.put(buf[:n])
		} else if errors.Is(err, io.EOF) {
			err = errdefs.Precondition("upper layer changed while the snapshot was taken (%q)", j.e.Path)
		}
		if err != nil {
			return fmt.Errorf("read %q in upper layer: %w", j.e.Path, err)
		}
		j.e.Chunks = append(j.e.Chunks, c)
	}
	j.e.Size = st.Size
	return nil
}

// isHole reports whether the chunk at off of the file fd holds no data at all, so a
// sparse file costs a seek per empty chunk instead of reading and hashing zeros.
func isHole(fd int, off int64) bool {
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true // no data from off to the end
	}
	return err == nil && data >= off+ChunkSize
}

// putZero is put for a full chunk of zeros, without hashing it again.
func (w *walker) putZero() (Chunk, error) {
	c := Chunk{Digest: "sha256:" + zeroChunk, Size: ChunkSize}
	if _, done := w.seen.Load(zeroChunk); done {
		return c, nil
	}
	return w.put(make([]byte, ChunkSize))
}

// put stores one chunk unless this Create or the store already has it.
func (w *walker) put(data []byte) (Chunk, error) {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	c := Chunk{Digest: "sha256:" + h, Size: int64(len(data))}
	if _, done := w.seen.LoadOrStore(h, true); done {
		return c, nil
	}
	added, err := w.s.putChunk(h, data)
	if err != nil {
		return c, fmt.Errorf("store chunk: %w", err)
	}
	if added {
		w.mu.Lock()
		w.added = append(w.added, h)
		w.stored += c.Size
		w.touched[h[:2]] = true
		w.mu.Unlock()
	}
	return c, nil
}

// syncTouched makes the names of the new chunks durable.
func (w *walker) syncTouched() error {
	for d := range w.touched {
		if err := durable.SyncDir(path.Join(w.s.dir, "chunks", d)); err != nil {
			return err
		}
	}
	return nil
}
