package oci

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/loopdev"
)

// TestDiskTemplatesPerSize: images of two sizes come from two templates, each image has
// the size asked for and a file system of that size, and what one image's file system
// holds is its own (neither the template nor a sibling sees it).
func TestDiskTemplatesPerSize(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	tm := newDiskTemplates(filepath.Join(dir, "templates"))
	ctx := context.Background()
	discard := slog.New(slog.DiscardHandler)
	sizes := []int64{64 << 20, 96 << 20}
	imgs := map[int64][]string{}
	for _, size := range sizes {
		for i := range 2 {
			img := filepath.Join(dir, filepath.Base(tm.path(size))+"-"+string(rune('a'+i)))
			if err := tm.make(ctx, img, size); err != nil {
				t.Fatalf("make %d bytes: %v", size, err)
			}
			imgs[size] = append(imgs[size], img)
		}
	}
	if a, b := tm.path(sizes[0]), tm.path(sizes[1]); a == b {
		t.Fatalf("sizes %d and %d share the template %s", sizes[0], sizes[1], a)
	}
	for _, size := range sizes {
		if st, err := os.Stat(tm.path(size)); err != nil || st.Size() != size {
			t.Fatalf("template of %d bytes: %v, %v", size, st, err)
		}
		for _, img := range imgs[size] {
			st, err := os.Stat(img)
			if err != nil || st.Size() != size {
				t.Fatalf("%s: got %v, %v; want %d bytes", img, st, err, size)
			}
			fsDir := filepath.Join(dir, "fs")
			mountAndUnmount(t, discard, img, fsDir, func() {
				var sfs unix.Statfs_t
				if err := unix.Statfs(fsDir, &sfs); err != nil {
					t.Fatal(err)
				}
				// The file system fills the image, less ext4's own metadata.
				if got := int64(sfs.Blocks) * sfs.Bsize; got > size || got < size*8/10 {
					t.Errorf("%s: file system of %d bytes in an image of %d", img, got, size)
				}
			})
		}
	}
	// A write to one image stays in it.
	first, second := imgs[sizes[0]][0], imgs[sizes[0]][1]
	fsDir := filepath.Join(dir, "fs")
	mountAndUnmount(t, discard, first, fsDir, func() {
		if err := os.WriteFile(filepath.Join(fsDir, "mine"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	for _, img := range []string{second, tm.path(sizes[0])} {
		mountAndUnmount(t, discard, img, fsDir, func() {
			if _, err := os.Stat(filepath.Join(fsDir, "mine")); !os.IsNotExist(err) {
				t.Errorf("%s sees a file written to %s: %v", img, first, err)
			}
		})
	}
}

// TestDiskImageTakesLittleHostDisk: a new image of the default size, and one made from
// its template, take well under a MiB of the host's disk (the resize inode's reserved
// blocks alone were 4 MiB an image).
func TestDiskImageTakesLittleHostDisk(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	tm := newDiskTemplates(filepath.Join(dir, "templates"))
	const size = 10 << 30
	img := filepath.Join(dir, "disk.img")
	if err := tm.make(context.Background(), img, size); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tm.path(size), img} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if used := st.Blocks * 512; used > 1<<20 {
			t.Errorf("%s takes %d bytes of the host's disk; want at most 1 MiB", p, used)
		}
	}
}

// TestDiskTemplatesBounded: past maxDiskTemplates sizes, an image is formatted on its
// own and no template of its size is kept.
func TestDiskTemplatesBounded(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	tm := newDiskTemplates(filepath.Join(dir, "templates"))
	for i := range maxDiskTemplates + 1 {
		size := int64(64+i) << 20
		img := filepath.Join(dir, "img"+strconv.Itoa(i))
		if err := tm.make(context.Background(), img, size); err != nil {
			t.Fatalf("make %d bytes: %v", size, err)
		}
		if st, err := os.Stat(img); err != nil || st.Size() != size {
			t.Fatalf("%s: got %v, %v; want %d bytes", img, st, err, size)
		}
		_, err := os.Stat(tm.path(size))
		if kept := err == nil; kept != (i < maxDiskTemplates) {
			t.Fatalf("size %d (the %d. asked for): template kept %v, want %v", size, i+1, kept, i < maxDiskTemplates)
		}
	}
	mountAndUnmount(t, slog.New(slog.DiscardHandler), filepath.Join(dir, "img"+strconv.Itoa(maxDiskTemplates)), filepath.Join(dir, "fs"), func() {})
}

// TestDiskPoolMounted: a ready image is taken already mounted where the sandbox's
// disk goes, held by that mount alone (unmounting it releases the loop device), and
// its record names its device; what a pool leaves behind (ready images, the mount of
// an image taken but never bound) is gone once the next pool starts.
func TestDiskPoolMounted(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	poolDir := filepath.Join(dir, "pool")
	tm := newDiskTemplates(filepath.Join(poolDir, "templates"))
	discard := slog.New(slog.DiscardHandler)
	const size = 64 << 20
	filled := func(p *diskPool, want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); len(p.ready()) < want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d images ready after 30 s; want %d", len(p.ready()), want)
			}
		}
	}
	p, err := newDiskPool(poolDir, size, 2, tm, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bindsource.Unmount(filepath.Join(dir, "fs"))
		p.close()
	})
	filled(p, 2)
	for _, img := range p.ready() {
		if ok, err := bindsource.MountRoot(mountOf(img)); err != nil || !ok {
			t.Fatalf("ready image %s is not mounted at %s: %v", img, mountOf(img), err)
		}
	}
	dst, fsDir := filepath.Join(dir, diskImage), filepath.Join(dir, "fs")
	if ok, err := p.take(dst, fsDir); err != nil || !ok {
		t.Fatalf("take = %v, %v; want a ready image", ok, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(fsDir, &sfs); err != nil || sfs.Type != unix.EXT4_SUPER_MAGIC {
		t.Fatalf("%s after take: %+v, %v; want an ext4", fsDir, sfs, err)
	}
	if dev, err := loopdev.Of(dst); err != nil || dev == "" {
		t.Fatalf("loopdev.Of(%s) = %q, %v; want its device", dst, dev, err)
	}
	if err := os.WriteFile(filepath.Join(fsDir, "mine"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(fsDir, 0); err != nil {
		t.Fatal(err)
	}
	if err := loopdev.WaitReleased(dst); err != nil {
		t.Fatalf("the taken image is still held after its mount went: %v", err)
	}
	mountAndUnmount(t, discard, dst, fsDir, func() {
		if _, err := os.Stat(filepath.Join(fsDir, "mine")); err != nil {
			t.Errorf("a file written to the taken image is not in it: %v", err)
		}
	})

	// A daemon killed between taking an image and binding it leaves the pool's mount
	// of it; the next pool lets it go.
	filled(p, 2)
	left := filepath.Join(dir, "left.img")
	ready := p.ready()
	if err := loopdev.Rename(ready[0], left); err != nil {
		t.Fatal(err)
	}
	p.cancel()
	p.wg.Wait() // no close: the ready images stay mounted, as after a kill
	if p, err = newDiskPool(poolDir, size, 1, tm, discard); err != nil {
		t.Fatal(err)
	}
	if err := loopdev.WaitReleased(left); err != nil {
		t.Errorf("an image taken but not bound is still held after a new pool started: %v", err)
	}
	for _, img := range ready {
		if ok, _ := bindsource.MountRoot(mountOf(img)); ok {
			t.Errorf("%s is still mounted after a new pool started", mountOf(img))
		}
	}
	filled(p, 1)
	p.close()
	for _, img := range p.ready() {
		if ok, _ := bindsource.MountRoot(mountOf(img)); ok {
			t.Errorf("%s is still mounted after close", mountOf(img))
		}
	}
	if ok, err := p.take(filepath.Join(dir, "late.img"), filepath.Join(dir, "late")); ok || err != nil {
		t.Errorf("take after close = %v, %v; want none", ok, err)
	}
}

// TestDiskPoolSkipsUnmounted: a ready image whose mount went behind the pool's back is
// never handed out (its bare directory would put the sandbox's layer on the host's
// disk, past its cap), and the pool makes another.
func TestDiskPoolSkipsUnmounted(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	poolDir := filepath.Join(dir, "pool")
	p, err := newDiskPool(poolDir, 64<<20, 1, newDiskTemplates(filepath.Join(poolDir, "templates")), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	waitReady := func() string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); len(p.ready()) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no image ready after 30 s")
			}
		}
		return p.ready()[0]
	}
	img := waitReady()
	if err := unix.Unmount(mountOf(img), 0); err != nil {
		t.Fatal(err)
	}
	fsDir := filepath.Join(dir, "fs")
	t.Cleanup(func() { bindsource.Unmount(fsDir) }) // before the pool's close
	if ok, err := p.take(filepath.Join(dir, diskImage), fsDir); ok || err != nil {
		t.Fatalf("take of an unmounted ready image = %v, %v; want none", ok, err)
	}
	if root, _ := bindsource.MountRoot(fsDir); root {
		t.Fatalf("%s was mounted from an unmounted ready image", fsDir)
	}
	if next := waitReady(); next == img {
		t.Fatalf("the unmounted image %s is still offered", img)
	}
	if ok, err := p.take(filepath.Join(dir, diskImage), fsDir); !ok || err != nil {
		t.Fatalf("take after the refill = %v, %v; want an image", ok, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(fsDir, &sfs); err != nil || sfs.Type != unix.EXT4_SUPER_MAGIC || int64(sfs.Blocks)*sfs.Bsize > 64<<20 {
		t.Errorf("%s after take: %+v, %v; want an ext4 of at most 64 MiB", fsDir, sfs, err)
	}
}

// BenchmarkSandboxDisk times what a create spends on its disk when the pool has one
// ready: taken pre-mounted (what a create does), against the same ready image attached
// and mounted in the create (what it did before), in turns. The pool's refill is not
// timed.
func BenchmarkSandboxDisk(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loop devices need root")
	}
	dir := b.TempDir()
	tm := newDiskTemplates(filepath.Join(dir, "pool", "templates"))
	discard := slog.New(slog.DiscardHandler)
	p, err := newDiskPool(filepath.Join(dir, "pool"), 10<<30, 1, tm, discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.close)
	ready := func() {
		for len(p.ready()) < 1 {
			time.Sleep(time.Millisecond)
		}
	}
	var premounted, mounted []time.Duration
	for i := 0; i < b.N; i++ {
		sb := filepath.Join(dir, "sb"+strconv.Itoa(i))
		img, fsDir := filepath.Join(sb, diskImage), filepath.Join(sb, "fs")
		if err := os.MkdirAll(sb, 0o700); err != nil {
			b.Fatal(err)
		}
		ready()
		start := time.Now()
		if ok, err := p.take(img, fsDir); !ok || err != nil {
			b.Fatalf("take: %v, %v", ok, err)
		}
		premounted = append(premounted, time.Since(start))
		unix.Unmount(fsDir, 0)
		loopdev.WaitReleased(img)

		old := filepath.Join(sb, "old.img")
		if err := tm.make(context.Background(), old, 10<<30); err != nil {
			b.Fatal(err)
		}
		oldFS := filepath.Join(sb, "oldfs")
		start = time.Now()
		if err := os.MkdirAll(oldFS, 0o711); err != nil {
			b.Fatal(err)
		}
		if err := loopdev.Mount(old, oldFS, ""); err != nil {
			b.Fatal(err)
		}
		mounted = append(mounted, time.Since(start))
		unix.Unmount(oldFS, 0)
		loopdev.WaitReleased(old)
		os.RemoveAll(sb)
	}
	at := func(d []time.Duration, q int) float64 {
		slices.Sort(d)
		return float64(d[len(d)*q/100].Microseconds()) / 1000
	}
	b.ReportMetric(at(premounted, 50), "premounted-p50-ms")
	b.ReportMetric(at(premounted, 90), "premounted-p90-ms")
	b.ReportMetric(at(mounted, 50), "mounted-p50-ms")
	b.ReportMetric(at(mounted, 90), "mounted-p90-ms")
}
