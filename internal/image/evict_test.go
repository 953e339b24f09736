package image

import (
	"context"
	"crypto/rand"
	"os"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestEvict holds the store to a cap: the pulled image used least recently goes
// first; one a sandbox runs on, an imported one and layers another image still has
// stay.
func TestEvict(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	defer reg.srv.Close()
	s := newStore(t)
	ctx := context.Background()
	blob := func(name string) []byte {
		b := make([]byte, 1<<20)
		rand.Read(b)
		return mkTar(t, fileEnt(name, string(b), 0o644))
	}
	shared := blob("shared")
	pull := func(repo string, own []byte) *Image {
		t.Helper()
		ref := reg.pushImage(t, repo, testImage(t, v1.Config{}, shared, own))
		img, err := s.Pull(ctx, alice, PullRequest{Ref: ref, Insecure: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	old, inUse, recent := pull("a/old:1", blob("old")), pull("a/inuse:1", blob("inuse")), pull("a/recent:1", blob("recent"))
	imported, err := importAs(t, s, alice, "imported", false, blob("imported"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List(alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range list {
		want := int64(0)
		if img.Digest != imported.Digest && !img.Builtin {
			want = img.LayerSizes[0] // the shared layer
		}
		if img.Shared != want || want > 0 && want < 1<<20 {
			t.Errorf("%s: shared %d bytes, want %d (the layer the pulled images share)", img.Name, img.Shared, want)
		}
	}
	// Use order: old first (long ago), then in-use, then recent.
	for i, img := range []*Image{old, inUse, recent} {
		s.Touch(img.Digest)
		at := time.Now().Add(time.Duration(i-3) * time.Hour)
		os.Chtimes(s.path("used", hexOf(img.Digest)), at, at)
	}
	users := func(d string) []string {
		if d == inUse.Digest {
			return []string{"alice"}
		}
		return nil
	}
	if removed, err := s.Evict(1<<40, users); err != nil || len(removed) != 0 {
		t.Fatalf("under the cap: evicted %v, %v", removed, err)
	}
	// Four unique 1 MiB layers plus the shared one and the imported one: a cap of
	// 4.5 MiB must evict the least recently used unused pulled image, and only it.
	removed, err := s.Evict(4<<20+512<<10, users)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{old.Digest}) {
		t.Fatalf("evicted %v, want only the least recently used %s", removed, old.Digest)
	}
	if _, err := s.Get(alice, "a/old:1"); err == nil {
		t.Error("the evicted image is still named")
	}
	for _, img := range []*Image{inUse, recent, imported} {
		if _, err := s.ByDigest(img.Digest); err != nil {
			t.Errorf("image %s was removed: %v", img.Name, err)
		}
		for _, dir := range s.LayerDirs(img) {
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("a layer of %s is gone: %v", img.Name, err)
			}
		}
	}
	// A cap nothing can meet evicts what it may and keeps the rest.
	removed, err = s.Evict(1, users)
	if err != nil || !slices.Equal(removed, []string{recent.Digest}) {
		t.Errorf("evict to 1 byte: %v, %v; want only %s (in use and imported stay)", removed, err, recent.Digest)
	}
}
