package image

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// collectLocked deletes layers, kept blobs and host skeletons that no record references
// and no pending pull younger than pendingTTL keeps, the blob notes of deleted layers, older
// pending records, and everything in tmp. The caller holds meta.lock; it does nothing
// while any import or pull runs.
func (s *Store) collectLocked() {
	unlock, err := s.lock("gc.lock", unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		return
	}
	defer unlock()
	digests, err := s.digests()
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, d := range digests {
		img, err := s.readRecord(d)
		if err != nil {
			return // never delete on a partial view
		}
		if img.Builtin {
			used["host/"+hexOf(d)] = true
		}
		for _, l := range img.Layers {
			used["layers/"+hexOf(l)] = true
		}
		for _, b := range blobsOf(img) {
			used["blobs/"+hexOf(b)] = true
		}
	}
	pending, stale, err := s.pendings()
	if err != nil {
		return
	}
	for _, p := range pending {
		for _, l := range p.Layers {
			used["layers/"+hexOf(l.DiffID)] = true
			if l.Blob != "" {
				used["blobs/"+hexOf(l.Blob)] = true
			}
		}
	}
	for _, path := range stale {
		os.Remove(path)
	}
	for _, kind := range []string{"layers", "host"} {
		ents, _ := os.ReadDir(s.path(kind))
		for _, e := range ents {
			if !used[kind+"/"+e.Name()] {
				s.discard(s.path(kind, e.Name()))
			}
		}
	}
	ents, _ := os.ReadDir(s.path("blobs"))
	for _, e := range ents {
		blob, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			// A kept blob (see blobs.go), unless a record or a pending pull names it.
			if validDigest("sha256:"+e.Name()) && !used["blobs/"+e.Name()] {
				os.Remove(s.path("blobs", e.Name()))
			}
			continue
		}
		if n, err := s.readBlobNote("sha256:" + blob); err != nil || !used["layers/"+hexOf(n.DiffID)] {
			os.Remove(s.path("blobs", e.Name()))
		}
	}
	ents, _ = os.ReadDir(s.path("tmp"))
	for _, e := range ents {
		os.RemoveAll(s.path("tmp", e.Name()))
	}
	for _, dir := range []string{s.dir, s.path("images"), s.path("blobs"), s.path("pending")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// discard moves dir into tmp first, so a half-deleted layer never sits under its id.
func (s *Store) discard(dir string) {
	gone, err := os.MkdirTemp(s.path("tmp"), "gone-")
	if err != nil {
		return
	}
	if err := os.Rename(dir, filepath.Join(gone, "d")); err != nil {
		os.Remove(gone)
		return
	}
	os.RemoveAll(gone)
}

// dirSize sums the sizes of the regular files below dir, counting hard links once.
func dirSize(dir string) int64 {
	var total int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += fi.Size()
		return nil
	})
	return total
}
