package bindsource

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIsTmpfs: only the topmost mount at the directory itself counts, whatever the
// directory is on, and a link to it is followed.
func TestIsTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	tm := filepath.Join(dir, "t")
	plain := filepath.Join(dir, "plain")
	for _, d := range []string{tm, plain} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(tm, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	check := func(when, p string, wantTmpfs, wantRoot bool) {
		t.Helper()
		if got, err := IsTmpfs(p); err != nil || got != wantTmpfs {
			t.Errorf("%s: IsTmpfs(%s) = %v, %v; want %v", when, p, got, err, wantTmpfs)
		}
		if got, err := MountRoot(p); err != nil || got != wantRoot {
			t.Errorf("%s: MountRoot(%s) = %v, %v; want %v", when, p, got, err, wantRoot)
		}
	}
	check("a plain directory", tm, false, false)
	check("a missing path", filepath.Join(dir, "missing"), false, false)
	if err := Tmpfs(tm, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Unmount(tm) })
	check("a tmpfs", tm, true, true)
	check("a link to a tmpfs", filepath.Join(dir, "link"), true, true)
	sub := filepath.Join(tm, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	check("a directory on a tmpfs", sub, false, false)
	if err := os.WriteFile(filepath.Join(tm, "kept"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Tmpfs(tm, "size=64k"); err != nil { // mounted already: kept as it is
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tm, "kept")); err != nil {
		t.Errorf("a second Tmpfs replaced the first: %v", err)
	}
	if err := unix.Mount(plain, tm, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	check("a directory bound over a tmpfs", tm, false, true)
}

// BenchmarkIsTmpfs is the check every networked create makes of its files' tmpfs: it
// must not grow with the node's mounts (a few per sandbox).
func BenchmarkIsTmpfs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("mounting needs root")
	}
	dir := b.TempDir()
	if err := Tmpfs(dir, "size=64k"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { Unmount(dir) })
	for b.Loop() {
		if ok, err := IsTmpfs(dir); err != nil || !ok {
			b.Fatalf("IsTmpfs = %v, %v", ok, err)
		}
	}
}
