// Package snapshot owns Airlock's snapshot store: immutable, checksummed copies of a
// sandbox's upper layer, each a JSON manifest over a shared content-addressed chunk
// store, and the rebuild of an upper layer from one (restore, fork).
//
// The store lives in one directory, owned by one Store at a time:
//
//	<dir>/manifests/<id>.json       one manifest per snapshot, written temp+fsync+rename
//	<dir>/chunks/<hex[:2]>/<hex>    one file per distinct chunk (raw bytes, named by the
//	                                sha256 of its content), written temp+fsync+rename
//
// Files are cut into fixed 1 MiB chunks. Upper layers change by whole-file rewrites or
// in-place writes (databases, images, caches), which fixed chunks at fixed offsets
// capture exactly; content-defined chunking pays a rolling hash over every byte to handle
// insertions in the middle of large files, which rarely happen there.
//
// Manifest entries carry container-native ids (host id minus the sandbox's uid base); ids
// inside xattrs (file capabilities' root id, POSIX ACLs) are shifted the same way.
//
// The package reads an upper layer only through descriptors reached from its root without
// following symlinks, writes only below its own directory and the destination it is
// given, never creates a device node other than an overlayfs whiteout, and never decides
// on its own what a snapshot is used by: Delete asks the caller. It must not mount
// anything or touch containers, the image store or the sandbox records.
//
// Hostile surfaces it guards: an upper layer is the sandbox's to shape (symlinks, device
// nodes, hard links, xattrs, sparse files): it is read without following links, ids are
// shifted, never trusted, and nothing from it is written outside the destination.
package snapshot

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/objstore"
)

// Snapshot states.
const (
	StateCreating = "creating"
	StateReady    = "ready"
	StateFailed   = "failed"
)

// Consistency of a snapshot: taken with the sandbox frozen, or stopped.
const (
	CrashConsistent = "crash-consistent"
	Stopped         = "stopped"
)

// ChunkSize is the size of every chunk but the last of a file.
const ChunkSize = 1 << 20

// idRange is the size of every sandbox's uid and gid range; overflowID is what an id
// outside it reads as inside the sandbox.
const (
	idRange    = 65536
	overflowID = 65534
)

// EntryType is the kind of one upper-layer path.
type EntryType string

// The entry types. A whiteout is an overlayfs 0:0 character device; a hardlink names the
// earlier file entry it shares an inode with. Sockets and other device nodes are not kept.
const (
	TypeFile     EntryType = "file"
	TypeDir      EntryType = "dir"
	TypeSymlink  EntryType = "symlink"
	TypeHardlink EntryType = "hardlink"
	TypeWhiteout EntryType = "whiteout"
	TypeFifo     EntryType = "fifo"
)

// Manifest describes one snapshot.
type Manifest struct {
	ID          string            `json:"id"` // "snap_…"
	SandboxID   string            `json:"sandbox_id"`
	ImageDigest string            `json:"image_digest"`
	Parent      string            `json:"parent,omitempty"` // the snapshot the sandbox was restored or forked from
	Consistency string            `json:"consistency"`      // CrashConsistent or Stopped
	State       string            `json:"state"`            // StateCreating, StateReady, StateFailed
	LogicalSize int64             `json:"logical_size"`     // sum of file sizes
	StoredSize  int64             `json:"stored_size"`      // bytes of chunks this snapshot added to the store
	Entries     []Entry           `json:"entries,omitempty"`
	Created     time.Time         `json:"created"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Location is the object store that holds the snapshot too ("s3://bucket/prefix"),
	// so any node can restore it; empty: this node's state directory only.
	Location string `json:"location,omitempty"`
	// Imported says this node read the manifest from the object store rather than
	// taking the snapshot; set by this node only, whatever the bucket's copy says.
	Imported bool `json:"imported,omitempty"`
	// Memory is the memory part of a snapshot taken with its memory (runsc): the image
	// of the sandbox's processes at the instant its files were copied, kept beside the
	// snapshot on the node that took it (never in an object store). nil: files only.
	Memory *MemoryImage `json:"memory,omitempty"`
}

// MemoryImage names the files of a snapshot's memory image and their checksums.
type MemoryImage struct {
	Bytes int64        `json:"bytes"` // on disk
	Files []MemoryFile `json:"files"`
}

// MemoryFile is one file of a memory image.
type MemoryFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Entry is one path of the upper layer ("." is its root), with container-native ids.
type Entry struct {
	Path   string            `json:"path"`
	Type   EntryType         `json:"type"`
	Mode   uint32            `json:"mode"` // permission bits with setuid, setgid and sticky
	UID    uint32            `json:"uid"`
	GID    uint32            `json:"gid"`
	MTime  int64             `json:"mtime"` // nanoseconds since the epoch
	Size   int64             `json:"size,omitempty"`
	Target string            `json:"target,omitempty"` // symlink content, or hardlink's file path
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
	Chunks []Chunk           `json:"chunks,omitempty"`
}

// Chunk is one piece of a file's content.
type Chunk struct {
	Digest string `json:"digest"` // "sha256:<hex>"
	Size   int64  `json:"size"`
}

// ErrCorrupt is the class of integrity failures: a chunk missing or not matching its
// digest. It is a failed precondition to a client; errors.Is tells it apart.
var ErrCorrupt = fmt.Errorf("snapshot corrupt: %w", errdefs.ErrFailedPrecondition)

// corrupt reports that chunk digest of snapshot id (used by path) is missing or damaged.
func corrupt(id, digest, path, what string) error {
	return errdefs.Precondition("snapshot %s is corrupt: chunk %s (of %q) %s", id, digest, path, what).
		WithDetails(map[string]any{"reason": "snapshot_corrupt", "snapshot_id": id, "chunk": digest, "path": path}).
		WithCause(ErrCorrupt)
}

// Store is a snapshot store in one directory.
type Store struct {
	dir string

	// gc is held shared by Create, Verify and Restore, and exclusively while chunks are
	// removed, so no chunk disappears under an operation that counted on it.
	gc sync.RWMutex

	mu    sync.Mutex
	refs  map[string]int       // chunk hex -> number of ready snapshots using it
	heads map[string]*Manifest // id -> manifest without entries

	objs     objstore.Store // nil: snapshots stay on this node
	grace    time.Duration  // how old an unreferenced object must be before it is removed
	importMu sync.Mutex     // one import of a manifest from the object store at a time
	gcFrom   uint8          // the chunk prefix the next gc pass of objs lists first
}

// Open opens (making it if needed) the store in dir. Snapshots left "creating" by a
// crash become "failed", and chunks no ready snapshot uses are removed.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir, refs: map[string]int{}, heads: map[string]*Manifest{}}
	for _, d := range []string{s.manifestDir(), filepath.Join(dir, "chunks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// The 256 prefix directories are made once here rather than by the first snapshot.
	for i := range 256 {
		err := os.Mkdir(filepath.Join(dir, "chunks", fmt.Sprintf("%02x", i)), 0o700)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
	}
	names, err := os.ReadDir(s.manifestDir())
	if err != nil {
		return nil, err
	}
	for _, de := range names {
		id, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !validID(id) {
			os.Remove(filepath.Join(s.manifestDir(), de.Name())) // a temp file of a crashed write
			continue
		}
		m, err := s.readManifest(id)
		if errors.Is(err, errBadManifest) {
			// Kept visible as failed so it can be deleted. Its chunks are not counted:
			// without its entries nothing can be restored from it anyway.
			s.heads[id] = &Manifest{ID: id, State: StateFailed}
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.State == StateCreating {
			// A crash cut its Create short: it is failed. It is failed in memory even
			// when that cannot be written (a full disk must not keep the daemon from
			// starting); the next Open writes it again.
			m.State, m.Entries = StateFailed, nil
			_ = s.writeManifest(m)
		}
		if m.State == StateReady {
			for _, hex := range chunkSet(m) {
				s.refs[hex]++
			}
		}
		s.heads[id] = head(m)
	}
	if err := s.sweep(); err != nil {
		return nil, err
	}
	return s, nil
}

// Get returns the snapshot id, with its entries when it is ready.
func (s *Store) Get(id string) (*Manifest, error) {
	if !validID(id) {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	s.mu.Lock()
	h, ok := s.heads[id]
	s.mu.Unlock()
	if !ok && s.objs != nil {
		return s.importManifest(id)
	}
	if !ok {
		return nil, errdefs.NotFound("snapshot %s not found", id)
	}
	if h.State != StateReady {
		return clone(h), nil
	}
	return s.readManifest(id)
}

// Shared says whether the snapshots are kept in an object store the cluster's nodes
// share (UseObjects), so that any node reads, forks and restores any of them; without
// one, a snapshot is only on the node that took it.
func (s *Store) Shared() bool { return s.objs != nil }

// List returns the snapshots of a sandbox (every snapshot when sandboxID is empty),
// oldest first, without their entries.
func (s *Store) List(sandboxID string) ([]*Manifest, error) {
	s.mu.Lock()
	var out []*Manifest
	for _, h := range s.heads {
		if sandboxID == "" || h.SandboxID == sandboxID {
			out = append(out, clone(h))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *Manifest) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ready returns the whole manifest of a ready snapshot.
func (s *Store) ready(id string) (*Manifest, error) {
	m, err := s.Get(id)
	if err != nil {
		return nil, err
	}
	if m.State != StateReady {
		return nil, errdefs.Precondition("snapshot %s is %s, not ready", id, m.State)
	}
	return m, nil
}

func (s *Store) setHead(m *Manifest) {
	s.mu.Lock()
	s.heads[m.ID] = head(m)
	s.mu.Unlock()
}

func head(m *Manifest) *Manifest {
	h := *m
	h.Entries = nil
	return &h
}

func clone(h *Manifest) *Manifest {
	c := *h
	c.Labels = cloneLabels(h.Labels)
	return &c
}

func cloneLabels(l map[string]string) map[string]string {
	if l == nil {
		return nil
	}
	c := make(map[string]string, len(l))
	for k, v := range l {
		c[k] = v
	}
	return c
}

func (s *Store) manifestDir() string { return filepath.Join(s.dir, "manifests") }

func (s *Store) manifestPath(id string) string {
	return filepath.Join(s.manifestDir(), id+".json")
}

// errBadManifest is a manifest file that cannot be decoded.
var errBadManifest = errors.New("malformed manifest")

func (s *Store) readManifest(id string) (*Manifest, error) {
	b, err := os.ReadFile(s.manifestPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("snapshot %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", errBadManifest, id, err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("%w: snapshot %s names %q", errBadManifest, id, m.ID)
	}
	return &m, nil
}

func (s *Store) writeManifest(m *Manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return durable.WriteFile(s.manifestPath(m.ID), b, 0o600)
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns a fresh snapshot id, for a caller that records a snapshot before
// Create makes it.
func NewID() string { return newID() }

func newID() string {
	var b [10]byte
	rand.Read(b[:])
	return "snap_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// validID reports whether id has the shape newID makes, so it is safe as a file name.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, "snap_")
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// checkBase refuses a uid base whose range would not fit in 32 bits.
func checkBase(base uint32) error {
	if uint64(base)+idRange > 1<<32 {
		return errdefs.Invalid("uid base %d leaves no room for a %d-id range", base, idRange)
	}
	return nil
}
