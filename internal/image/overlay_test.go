package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOverlayMount mounts a two-layer image the way the runtime will and checks that
// the whiteout and the opaque directory do their job.
func TestOverlayMount(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	img, err := importLocal(s, context.Background(), writeFile(t, t.TempDir(), "a.tar", dockerSave(t, "a:1", configJSON(t, base, top), base, top)), "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	lower := s.LayerDirs(img)
	slices.Reverse(lower) // overlayfs lists the top layer first
	target := t.TempDir()
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		if os.Getenv("CI") != "true" && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV)) {
			t.Skipf("cannot mount overlayfs here: %v", err)
		}
		t.Fatalf("mount overlay: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
	for name, want := range map[string]bool{
		"etc/motd": false, "etc/motd2": true, "etc/keep": true, "etc/added": true,
		"var/cache/old": false, "var/cache/new": true, "bin/su": true,
	} {
		_, err := os.Lstat(filepath.Join(target, name))
		if got := err == nil; got != want {
			t.Errorf("%s present = %v, want %v (%v)", name, got, want, err)
		}
	}
	if st := lstat(t, filepath.Join(target, "home/u")); st.Uid != 1000 {
		t.Errorf("home/u uid %d in the merged tree, want 1000", st.Uid)
	}
}
