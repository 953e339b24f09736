package loopdev

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mounted makes a small image in a temporary directory and mounts it, unmounted when
// tb ends; it skips without root.
func mounted(tb testing.TB) (img, dev string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("loop devices need root")
	}
	dir := tb.TempDir()
	img = filepath.Join(dir, "disk.img")
	if err := MakeImage(context.Background(), img, 16<<20); err != nil {
		tb.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		tb.Fatal(err)
	}
	dev, err := MountDev(img, mnt, "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		unix.Unmount(mnt, unix.MNT_DETACH)
		WaitReleased(img)
	})
	return img, dev
}

// BenchmarkOf finds the device of a mounted image, among all the node's loop devices.
func BenchmarkOf(b *testing.B) {
	img, dev := mounted(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got, err := Of(img); err != nil || got != dev {
			b.Fatalf("Of = %q, %v; want %q", got, err, dev)
		}
	}
}

// BenchmarkWaitReleased is the check of an image no device backs any more (after an
// unmount, before a mount or a copy).
func BenchmarkWaitReleased(b *testing.B) {
	img, _ := mounted(b)
	dir := filepath.Dir(img)
	if err := unix.Unmount(filepath.Join(dir, "mnt"), 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := WaitReleased(img); err != nil {
			b.Fatal(err)
		}
	}
}
