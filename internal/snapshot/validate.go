package snapshot

import (
	"path"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// checkPath accepts a clean path relative to the layer root: no empty, absolute or NUL
// path, no "..", no "." except the root itself, nothing path.Clean would change.
func checkPath(p string) error {
	switch {
	case p == "":
		return errdefs.Invalid("manifest has an empty path")
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.Invalid("manifest path %q contains a NUL byte", p)
	case strings.HasPrefix(p, "/"):
		return errdefs.Invalid("manifest path %q is absolute", p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return errdefs.Invalid("manifest path %q escapes the layer root", p)
	case path.Clean(p) != p:
		return errdefs.Invalid("manifest path %q is not clean", p)
	}
	return nil
}

// validate checks a manifest before anything is built from it, as if it came from
// anywhere: the root comes first; every path is clean, unique and has an earlier
// directory as parent; hardlinks name an earlier file; ids fit the sandbox range; modes
// are permission bits; chunk digests are well formed and add up to the file size.
func validate(m *Manifest) error {
	if len(m.Entries) == 0 || m.Entries[0].Path != "." || m.Entries[0].Type != TypeDir {
		return errdefs.Invalid("manifest of snapshot %s does not start with its root directory", m.ID)
	}
	kinds := make(map[string]EntryType, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := checkEntry(e, i == 0, kinds); err != nil {
			return err
		}
		kinds[e.Path] = e.Type
	}
	return nil
}

func checkEntry(e *Entry, root bool, kinds map[string]EntryType) error {
	if err := checkPath(e.Path); err != nil {
		return err
	}
	if !root {
		if e.Path == "." {
			return errdefs.Invalid("manifest names the root twice")
		}
		if _, dup := kinds[e.Path]; dup {
			return errdefs.Invalid("manifest path %q appears twice", e.Path)
		}
		if kinds[path.Dir(e.Path)] != TypeDir {
			return errdefs.Invalid("manifest path %q has no directory entry before it for its parent", e.Path)
		}
	}
	if e.Mode&^0o7777 != 0 {
		return errdefs.Invalid("manifest path %q has mode %o beyond permission bits", e.Path, e.Mode)
	}
	if e.UID >= idRange || e.GID >= idRange {
		return errdefs.Invalid("manifest path %q is owned by %d:%d, outside the sandbox range", e.Path, e.UID, e.GID)
	}
	for name := range e.Xattrs {
		if name == "" || strings.IndexByte(name, 0) >= 0 {
			return errdefs.Invalid("manifest path %q has a malformed xattr name", e.Path)
		}
	}
	if e.Type != TypeFile && (len(e.Chunks) > 0 || e.Size != 0) {
		return errdefs.Invalid("manifest %s %q has content", e.Type, e.Path)
	}
	switch e.Type {
	case TypeDir, TypeWhiteout, TypeFifo:
		if e.Target != "" {
			return errdefs.Invalid("manifest %s %q has a target", e.Type, e.Path)
		}
	case TypeFile:
		return checkChunks(e)
	case TypeSymlink:
		if e.Target == "" || strings.IndexByte(e.Target, 0) >= 0 || len(e.Target) > 4095 {
			return errdefs.Invalid("manifest symlink %q has a malformed target", e.Path)
		}
	case TypeHardlink:
		if err := checkPath(e.Target); err != nil {
			return err
		}
		if kinds[e.Target] != TypeFile {
			return errdefs.Invalid("manifest hardlink %q names %q, not an earlier file", e.Path, e.Target)
		}
	default:
		return errdefs.Invalid("manifest path %q has unknown type %q", e.Path, e.Type)
	}
	return nil
}

func checkChunks(e *Entry) error {
	var total int64
	for i, c := range e.Chunks {
		if _, ok := digestHex(c.Digest); !ok {
			return errdefs.Invalid("manifest file %q has a malformed chunk digest %q", e.Path, c.Digest)
		}
		last := i == len(e.Chunks)-1
		if c.Size <= 0 || c.Size > ChunkSize || !last && c.Size != ChunkSize {
			return errdefs.Invalid("manifest file %q has a chunk of size %d", e.Path, c.Size)
		}
		total += c.Size
	}
	if total != e.Size {
		return errdefs.Invalid("manifest file %q has size %d but chunks of %d bytes", e.Path, e.Size, total)
	}
	return nil
}
