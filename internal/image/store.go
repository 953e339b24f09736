// Package image owns Airlock's image store: digest-pinned, read-only root filesystems
// made of layers, the built-in host image, the import of image archives (plain rootfs
// tarballs, `docker save` archives, OCI image layouts), and the pull of images from OCI
// registries. Each layer is unpacked once, with its archive ownership
// (container-native, never shifted), into a directory that every image and sandbox
// using it shares as an overlayfs lower dir.
//
// Images have owners. A name belongs to one owner (a private image, seen and changed
// by that owner only) or is public (seen by every owner, published, replaced and
// removed by administrators only); the host image is public and built in. A name
// resolves to the caller's own image first, then to the public one, and a digest only
// among the images the caller sees: another owner's private image is not found, just
// like one that does not exist. The registry reference an image was pulled from is
// kept with the owner's name, never in the record owners share.
//
// Hostile surfaces it guards: every archive is hostile (written by any owner, and by
// whatever ran in the sandbox that produced it), so is every registry and all it sends
// (a reference names any host), and so is every name and digest another owner chooses.
// An import or pull never writes outside its layer directory (no absolute or climbing
// names, no link followed, no hard link out of the layer, no device nodes, no
// trusted.* or security.* xattrs); it is held to the node's limits on unpacked bytes and
// on the compression ratio, checked while it unpacks, and to its owner's quota; it never
// replaces or reveals another owner's image; and it reuses an unpacked layer only when
// an image its owner sees already has it (or, for a pull, when the owner's own earlier
// attempt unpacked it, or the registry the blob was verified from confirms to the
// owner's credentials that it serves it), so naming a layer's digest never grants its
// data. A pull checks every manifest, config and blob against its digest and every
// layer against its diff id while it streams, reads no more of a blob than the manifest
// says, speaks plain http only when asked to, and gives up on a registry that stays
// silent for Limits.RegistryTimeout. The upload size limit (Limits.Upload) is enforced
// by the HTTP edge.
//
// The store lives in one directory and keeps its metadata in plain files written
// temp+rename, so a crash never leaves a half record:
//
//	<dir>/images/<hex>.json   one record per image, by digest (shared by every owner's refs)
//	<dir>/refs.json           (owner, name, visibility) -> digest, and the reference pulled
//	<dir>/names.json          name -> digest, from versions without owners; read as
//	                          private images of LegacyOwner and replaced by refs.json
//	<dir>/layers/<hex>/       an unpacked layer, by diff id
//	<dir>/blobs/<hex>.json    a pulled layer blob, by digest: the diff id it was verified
//	                          to unpack to, and the registries it was verified from
//	<dir>/blobs/<hex>         a layer blob as it came (compressed or not), or an image's
//	                          manifest or config bytes, kept for exports
//	<dir>/pending/<hex>.json  a pull that has not succeeded: owner, reference, when, and
//	                          the layers it unpacked, kept for a retry
//	<dir>/host/<hex>/         the host image's generated skeleton, by image digest
//	<dir>/tmp/                imports and pulls in progress; emptied when none runs
//	<dir>/meta.lock           held to change refs or records
//	<dir>/gc.lock             shared by imports and pulls, exclusive to delete layers
//
// A layer stays while any record uses it or a pending pull younger than a day keeps
// it, and a record while any owner's ref points at it or a sandbox runs on it.
//
// Files: store.go (records, names, removal), refs.go (owners' refs), import.go
// (archives) and archive.go (their formats), pull.go (registries) and registry.go (the
// go-containerregistry client), install.go (what imports and pulls share: locking,
// budgets, fetching and verifying a layer, commit), unpack.go (the layer unpacker and
// its guards), filedata.go (file contents, holes kept), blobs.go (the blobs kept for
// exports), export.go, limits.go, pending.go (pending pulls, blob notes), gc.go,
// host.go, evict.go.
//
// The package must not mount anything, touch sandboxes' upper layers, or know about the
// state of sandboxes beyond the callbacks it is given.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
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
	Name   string   `json:"name"`
	Digest string   `json:"digest"` // "sha256:<hex>", the manifest/content digest that pins it
	Layers []string `json:"layers"` // layer ids (diff ids "sha256:<hex>"), lowest first
	Config Config   `json:"config"`
	Mounts []Mount  `json:"mounts,omitempty"` // only the host image has these
	Size   int64    `json:"size"`             // unpacked bytes
	// LayerSizes are the unpacked bytes of each layer (records made before they were
	// kept have none).
	LayerSizes []int64 `json:"layer_sizes,omitempty"`
	// Shared is how many of Size's bytes are layers another image the caller sees has
	// too (List fills it in).
	Shared  int64     `json:"-"`
	Created time.Time `json:"created"`
	Builtin bool      `json:"builtin"`
	// Reference is the canonical registry reference the image was pulled from under
	// Name ("index.docker.io/library/python:3.12-slim"); "" when it was imported. Like
	// Name it comes from the ref, never from the record every owner's refs share.
	Reference string `json:"reference,omitempty"`
	// Format is how the image came ("oci", "docker" or "rootfs"; "" for the host image
	// and records older than it). Blobs are the digests of the layer blobs the store
	// keeps, lowest first, and Manifest and ConfigDigest those of its manifest and
	// config bytes: what an export writes. Blobs is empty when the store does not keep
	// every layer's blob (records made before it kept them).
	Format       string   `json:"format,omitempty"`
	Blobs        []string `json:"blobs,omitempty"`
	Manifest     string   `json:"manifest,omitempty"`
	ConfigDigest string   `json:"config_digest,omitempty"`
	// Owner and Public say whose name Name is: an owner's private image, or one every
	// owner sees. Records keep neither; they come from the ref the image was found by.
	Owner  string `json:"-"`
	Public bool   `json:"-"`
}

// Progress receives the progress of a long step: phase "unpack" counts archive bytes
// read across all layers.
type Progress func(phase string, done, total int64)

// Store is the image store in one directory. It is safe for concurrent use, also by
// several processes.
type Store struct {
	dir    string
	limits atomic.Pointer[Limits]
	clock  func() time.Time // nil: time.Now; tests move it to age pending pulls

	usersMu sync.Mutex
	users   map[string]*[2]uint32 // image digest -> the uid and gid its config's user names (nil: root)
}

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// SetLimits sets the limits imports are held to; zero fields take DefaultLimits.
func (s *Store) SetLimits(l Limits) {
	l = l.withDefaults()
	s.limits.Store(&l)
}

// Limits returns the limits imports are held to.
func (s *Store) Limits() Limits {
	if l := s.limits.Load(); l != nil {
		return *l
	}
	return DefaultLimits()
}

// Open opens (creating its layout if needed) the store in dir and makes sure the host
// image matches the host.
func Open(dir string) (*Store, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir}
	for _, d := range []string{dir, s.path("images"), s.path("layers"), s.path("host"), s.path("tmp"), s.path("blobs"), s.path("pending")} {
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
	if err := s.migrateLocked(); err != nil {
		return nil, fmt.Errorf("image names: %w", err)
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

// Get returns the image ref names for sc: sc's own image of that name, else the public
// one; or the image with the digest ref, or the digest starting with ref (at least 12
// hex digits, "sha256:" optional), among those sc sees. Another owner's private image
// is not found, exactly like one that does not exist.
func (s *Store) Get(sc Scope, ref string) (*Image, error) {
	t, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	digest, idx, err := s.resolve(sc, t, ref)
	if err != nil {
		return nil, err
	}
	img, err := s.readRecord(digest)
	if err != nil {
		return nil, err
	}
	if idx >= 0 {
		img.setRef(t.Refs[idx])
	} else if r, ok := t.nameFor(sc, digest); ok {
		img.setRef(r)
	}
	return img, nil
}

// ByDigest returns the image with exactly this digest, whoever keeps it. It is for
// digests the daemon recorded itself (a sandbox's image), never for a caller's ref.
func (s *Store) ByDigest(digest string) (*Image, error) {
	if !validDigest(digest) {
		return nil, errdefs.NotFound("image %q not found", digest)
	}
	return s.readRecord(digest)
}

func (img *Image) setRef(r ref) {
	img.Name, img.Owner, img.Public, img.Reference = r.Name, r.Owner, r.Public, r.Reference
}

// List returns the images sc sees: one entry per ref of its own (named, or kept by
// digest after its name moved on) and per public ref. An administrator also sees the
// images no ref points at any more, without a name.
func (s *Store) List(sc Scope) ([]*Image, error) {
	t, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	digests, err := s.digests()
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, d := range digests {
		refd := t.pointsAt(d)
		if refd && !t.visibleDigests(sc)[d] || !refd && !sc.Admin {
			continue
		}
		img, err := s.readRecord(d)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				continue // removed meanwhile
			}
			return nil, err
		}
		if !refd {
			out = append(out, img)
			continue
		}
		for _, r := range t.Refs {
			if r.Digest == d && r.visible(sc) {
				c := *img
				c.setRef(r)
				out = append(out, &c)
			}
		}
	}
	// Shared bytes: layers another listed image (another digest) has too.
	holders := map[string]map[string]bool{} // layer -> digests
	for _, img := range out {
		for _, l := range img.Layers {
			if holders[l] == nil {
				holders[l] = map[string]bool{}
			}
			holders[l][img.Digest] = true
		}
	}
	for _, img := range out {
		for i, l := range img.Layers {
			if i < len(img.LayerSizes) && len(holders[l]) > 1 {
				img.Shared += img.LayerSizes[i]
			}
		}
	}
	slices.SortFunc(out, func(a, b *Image) int {
		if a.Name != b.Name {
			if a.Name == "" || b.Name == "" {
				return strings.Compare(b.Name, a.Name) // unnamed last
			}
			return strings.Compare(a.Name, b.Name)
		}
		if a.Public != b.Public {
			if a.Public {
				return 1 // an owner's own image before the public one it hides
			}
			return -1
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out, nil
}

// Users reports the owners whose live sandboxes run on an image, by digest.
type Users func(digest string) []string

// Remove removes sc's image ref. By name it drops sc's own name (or, for an
// administrator, the public one the name resolves to); by digest, every ref sc may
// change that points at it. The image itself goes, with the layers no image uses any
// more, once no ref points at it and no sandbox runs on it: while one of sc's own
// sandboxes does, the remove is refused; while only other owners' sandboxes do, the
// image is kept for them without a name and goes once they are gone. A non-administrator
// cannot remove a public image, and the host image cannot be removed.
func (s *Store) Remove(sc Scope, refStr string, users Users) error {
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := s.readRefs()
	if err != nil {
		return err
	}
	digest, idx, err := s.resolve(sc, t, refStr)
	if err != nil {
		return err
	}
	if h := t.find("", HostName, true); h >= 0 && t.Refs[h].Digest == digest {
		return errdefs.Precondition("the built-in %s image cannot be removed", HostName)
	}
	drop := map[int]bool{}
	for i, r := range t.Refs {
		if (i == idx || idx < 0 && r.Digest == digest) && r.changeable(sc) {
			drop[i] = true
		}
	}
	if len(drop) == 0 && t.pointsAt(digest) {
		return publicOnly("remove", refStr)
	}
	rest := &refTable{}
	for i, r := range t.Refs {
		if !drop[i] {
			rest.Refs = append(rest.Refs, r)
		}
	}
	if !rest.pointsAt(digest) && users != nil && slices.Contains(users(digest), sc.Owner) {
		return errdefs.Precondition("image %s (%s) is in use by one or more of your sandboxes; terminate them first", refStr, digest).
			WithDetails(map[string]any{"digest": digest})
	}
	if err := s.writeRefs(rest); err != nil {
		return err
	}
	return s.sweepLocked(rest, users)
}

// sweepLocked deletes the records no ref points at and no sandbox runs on (users nil:
// none does), except the host image's, then collects their layers. The caller holds
// meta.lock.
func (s *Store) sweepLocked(t *refTable, users Users) error {
	digests, err := s.digests()
	if err != nil {
		return err
	}
	for _, d := range digests {
		if t.pointsAt(d) || (users != nil && len(users(d)) > 0) {
			continue
		}
		if err := os.Remove(s.recordPath(d)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	s.collectLocked()
	return nil
}

// HasLayer reports whether the layer id (a diff id) is unpacked in the store.
func (s *Store) HasLayer(id string) bool {
	_, err := os.Lstat(s.path("layers", hexOf(id)))
	return err == nil
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

// ImageFiles implements runtime.ImageSource: the layer directories and binds of the
// image with digest, in any scope (the caller resolved the name in the owner's).
func (s *Store) ImageFiles(digest string) (runtime.ImageFiles, error) {
	img, err := s.ByDigest(digest)
	if err != nil {
		return runtime.ImageFiles{}, err
	}
	f := runtime.ImageFiles{Layers: s.LayerDirs(img)}
	for _, m := range img.Mounts {
		f.Mounts = append(f.Mounts, runtime.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
	}
	return f, nil
}

func (s *Store) recordPath(digest string) string {
	return s.path("images", hexOf(digest)+".json")
}

// digests lists the digests of all image records.
// Digests are the digests of every image the store holds, whoever may see them.
func (s *Store) Digests() ([]string, error) { return s.digests() }

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
	return s.rewriteRecord(img)
}

// rewriteRecord writes img's record whether or not there is one; the caller holds
// meta.lock.
func (s *Store) rewriteRecord(img *Image) error {
	c := *img
	c.Name, c.Owner, c.Public, c.Reference = "", "", false, ""
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(s.recordPath(img.Digest), b, 0o600)
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
