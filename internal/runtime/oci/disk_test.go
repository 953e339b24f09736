package oci

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
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
