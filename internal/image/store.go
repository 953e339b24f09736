// Package image owns Airlock's image store: digest-pinned, read-only root filesystems
// made of layers, the built-in host image, and the import of image archives (plain
// rootfs tarballs, `docker save` archives, OCI image layouts). Each layer is unpacked
// once, with its archive ownership (container-native, never shifted), into a directory
// that every image and sandbox using it shares as an overlayfs lower dir.
//
// The store lives in one directory and keeps its metadata in plain files written
// temp+rename, so a crash never leaves a half record:
//
//	<dir>/images/<hex>.json  one record per image, by digest
//	<dir>/names.json         name -> digest
//	<dir>/layers/<hex>/      an unpacked layer, by diff id
//	<dir>/host/<hex>/        the host image's generated skeleton, by image digest
//	<dir>/tmp/               imports in progress; emptied when no import runs
//	<dir>/meta.lock          held to change names or records
//	<dir>/gc.lock            shared by imports, exclusive to delete layers
//
// The package must not mount anything, touch sandboxes' upper layers, or know about the
// state of sandboxes beyond the in-use callback it is given; it never follows a link an
// archive created while writing a layer.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/fsutil"
)

// HostName is the name of the built-in image made from the host's own /usr.
const HostName = "host"

// Config is the part of an image's configuration a sandbox uses.
type Config struct {
	Env              []string
	Entrypoint, Cmd  []string
	WorkingDir, User string
}

// Mount is a host bind mount an image needs.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Image is a digest-pinned read-only root filesystem.
type Image struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"` // "sha256:<hex>", the manifest/content digest that pins it
	Layers  []string  `json:"layers"` // layer ids (diff ids "sha256:<hex>"), lowest first
	Config  Config    `json:"config"`
	Mounts  []Mount   `json:"mounts,omitempty"` // only the host image has these
	Size    int64     `json:"size"`             // unpacked bytes
	Created time.Time `json:"created"`
	Builtin bool      `json:"builtin"`
}

// Progress receives the progress of a long step: phase "unpack" counts archive bytes
// read across all layers.
type Progress func(phase string, done, total int64)

// Store is the image store in one directory. It is safe for concurrent use, also by
// several processes.
type Store struct {
	dir string
}

// Open opens (creating its layout if needed) the store in dir and makes sure the host
// image matches the host.
func Open(dir string) (*Store, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir}
	for _, d := range []string{dir, s.path("images"), s.path("layers"), s.path("host"), s.path("tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.ensureHost("/"); err != nil {
		return nil, fmt.Errorf("host image: %w", err)
	}
	s.collectLocked()
	return s, nil
}

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

// lock takes a flock on a file of the store; the returned func releases it. With
// LOCK_NB a held lock returns unix.EWOULDBLOCK.
func (s *Store) lock(name string, how int) (func(), error) {
	f, err := os.OpenFile(s.path(name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Get returns the image with the name ref, the digest ref, or the digest starting with
// ref (at least 12 hex digits, "sha256:" optional).
func (s *Store) Get(ref string) (*Image, error) {
	names, err := s.readNames()
	if err != nil {
		return nil, err
	}
	digest, byName, err := s.resolve(ref, names)
	if err != nil {
		return nil, err
	}
	img, err := s.readRecord(digest)
	if err != nil {
		return nil, err
	}
	if byName {
		img.Name = ref
	} else {
		img.Name = firstName(names, digest)
	}
	return img, nil
}

// List returns one entry per name, plus one (with no name) per image no name points to.
func (s *Store) List() ([]*Image, error) {
	names, err := s.readNames()
	if err != nil {
		return nil, err
	}
	digests, err := s.digests()
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, d := range digests {
		img, err := s.readRecord(d)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				continue // removed meanwhile
			}
			return nil, err
		}
		named := false
		for n, nd := range names {
			if nd == d {
				c := *img
				c.Name = n
				out = append(out, &c)
				named = true
			}
		}
		if !named {
			out = append(out, img)
		}
	}
	slices.SortFunc(out, func(a, b *Image) int {
		if a.Name != b.Name {
			if a.Name == "" || b.Name == "" {
				return strings.Compare(b.Name, a.Name) // unnamed last
			}
			return strings.Compare(a.Name, b.Name)
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out, nil
}

// Remove removes the image ref. A name that shares its image with other names is only
// untagged; otherwise the image and every name of it go, refused while inUse(digest)
// reports a sandbox on it, and layers no image references any more are deleted. The
// host image cannot be removed.
func (s *Store) Remove(ref string, inUse func(digest string) bool) error {
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	names, err := s.readNames()
	if err != nil {
		return err
	}
	digest, byName, err := s.resolve(ref, names)
	if err != nil {
		return err
	}
	if digest == names[HostName] {
		return errdefs.Precondition("the built-in %s image cannot be removed", HostName)
	}
	var tags []string
	for n, d := range names {
		if d == digest {
			tags = append(tags, n)
		}
	}
	if byName && len(tags) > 1 {
		delete(names, ref)
		return s.writeNames(names)
	}
	if inUse != nil && inUse(digest) {
		return errdefs.Precondition("image %s (%s) is in use by one or more sandboxes; terminate them first", ref, digest).
			WithDetails(map[string]any{"digest": digest})
	}
	for _, n := range tags {
		delete(names, n)
	}
	if err := s.writeNames(names); err != nil {
		return err
	}
	if err := os.Remove(s.recordPath(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	s.collectLocked()
	return nil
}

// LayerDirs returns the absolute directories of img's layers, lowest first.
func (s *Store) LayerDirs(img *Image) []string {
	if img.Builtin {
		return []string{s.path("host", hexOf(img.Digest))}
	}
	dirs := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		dirs[i] = s.path("layers", hexOf(l))
	}
	return dirs
}

// resolve maps ref to a digest; byName tells whether ref was a name.
func (s *Store) resolve(ref string, names map[string]string) (digest string, byName bool, err error) {
	if d, ok := names[ref]; ok {
		return d, true, nil
	}
	h := strings.TrimPrefix(ref, "sha256:")
	if len(h) >= 12 && len(h) <= 64 && isHex(h) {
		digests, err := s.digests()
		if err != nil {
			return "", false, err
		}
		var found []string
		for _, d := range digests {
			if strings.HasPrefix(hexOf(d), h) {
				found = append(found, d)
			}
		}
		if len(found) == 1 {
			return found[0], false, nil
		}
		if len(found) > 1 {
			return "", false, errdefs.NotFound("image %q is ambiguous: %d images have that digest prefix", ref, len(found))
		}
	}
	return "", false, errdefs.NotFound("image %q not found", ref)
}

func firstName(names map[string]string, digest string) string {
	var ns []string
	for n, d := range names {
		if d == digest {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	if len(ns) == 0 {
		return ""
	}
	return ns[0]
}

func (s *Store) recordPath(digest string) string {
	return s.path("images", hexOf(digest)+".json")
}

// digests lists the digests of all image records.
func (s *Store) digests() ([]string, error) {
	ents, err := os.ReadDir(s.path("images"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		h, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && len(h) == 64 && isHex(h) {
			out = append(out, "sha256:"+h)
		}
	}
	return out, nil
}

func (s *Store) readRecord(digest string) (*Image, error) {
	b, err := os.ReadFile(s.recordPath(digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("image %s not found", digest)
	}
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image record %s: %w", digest, err)
	}
	return &img, nil
}

// writeRecord stores img (without its name) unless a record for its digest exists.
func (s *Store) writeRecord(img *Image) error {
	if _, err := os.Stat(s.recordPath(img.Digest)); err == nil {
		return nil
	}
	c := *img
	c.Name = ""
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(s.recordPath(img.Digest), b, 0o600)
}

func (s *Store) readNames() (map[string]string, error) {
	names := map[string]string{}
	b, err := os.ReadFile(s.path("names.json"))
	if errors.Is(err, os.ErrNotExist) {
		return names, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("names.json: %w", err)
	}
	return names, nil
}

func (s *Store) writeNames(names map[string]string) error {
	b, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(s.path("names.json"), b, 0o600)
}

func hexOf(digest string) string { return strings.TrimPrefix(digest, "sha256:") }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// validDigest reports whether d is "sha256:" and 64 lowercase hex digits.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	return ok && len(h) == 64 && isHex(h)
}
