package image

import (
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// The store may be held to a size: pulled images are a cache, and the ones used least
// recently are evicted when the store grows past the cap. An image goes only when every
// name for it was pulled from a registry (an imported image may exist nowhere else) and
// no sandbox runs on it; its shared layers stay while another image has them. Use is
// recorded by Touch, as a file's modification time under <dir>/used/, so that it costs
// no rewrite of the records.

// Touch records that a sandbox was just made from the image digest.
func (s *Store) Touch(digest string) {
	if !validDigest(digest) {
		return
	}
	p := s.path("used", hexOf(digest))
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		if err := os.MkdirAll(s.path("used"), 0o700); err == nil {
			if f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				f.Close()
			}
		}
	}
}

// lastUsed is when a sandbox was last made from img (its creation, if never).
func (s *Store) lastUsed(img *Image) time.Time {
	if fi, err := os.Stat(s.path("used", hexOf(img.Digest))); err == nil && fi.ModTime().After(img.Created) {
		return fi.ModTime()
	}
	return img.Created
}

// Evict removes pulled images, least recently used first, until the images the store
// keeps take at most max unpacked bytes (each layer counted once), and returns the
// digests it removed. Images a sandbox runs on (users), imported images and the host
// image are never evicted, so the store may stay above max.
func (s *Store) Evict(max int64, users Users) ([]string, error) {
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	t, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	digests, err := s.digests()
	if err != nil {
		return nil, err
	}
	layerSize := map[string]int64{} // each layer once
	var imgs []*Image
	for _, d := range digests {
		img, err := s.readRecord(d)
		if err != nil || img.Builtin {
			continue
		}
		imgs = append(imgs, img)
		for _, l := range img.Layers {
			if _, ok := layerSize[l]; !ok {
				layerSize[l] = dirSize(s.path("layers", hexOf(l)))
			}
		}
	}
	var total int64
	for _, n := range layerSize {
		total += n
	}
	if total <= max {
		return nil, nil
	}
	slices.SortFunc(imgs, func(a, b *Image) int { return s.lastUsed(a).Compare(s.lastUsed(b)) })
	var removed []string
	for _, img := range imgs {
		if total <= max {
			break
		}
		if !t.allPulled(img.Digest) || users != nil && len(users(img.Digest)) > 0 {
			continue
		}
		t.dropDigest(img.Digest)
		removed = append(removed, img.Digest)
		// Its layers free space once no image left has them.
		for _, l := range img.Layers {
			if !slices.ContainsFunc(imgs, func(o *Image) bool {
				return !slices.Contains(removed, o.Digest) && slices.Contains(o.Layers, l)
			}) {
				total -= layerSize[l]
				layerSize[l] = 0
			}
		}
		os.Remove(s.path("used", hexOf(img.Digest)))
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := s.writeRefs(t); err != nil {
		return nil, err
	}
	return removed, s.sweepLocked(t, users)
}

// allPulled says whether every ref to digest was pulled from a registry (and there
// is at least one).
func (t *refTable) allPulled(digest string) bool {
	n := 0
	for _, r := range t.Refs {
		if r.Digest == digest {
			if r.Reference == "" {
				return false
			}
			n++
		}
	}
	return n > 0
}

// dropDigest removes every ref to digest.
func (t *refTable) dropDigest(digest string) {
	t.Refs = slices.DeleteFunc(t.Refs, func(r ref) bool { return r.Digest == digest })
}
