package snapshot

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const benchLayerSize = 100 << 20

// benchLayer makes a 100 MiB upper layer: one 64 MiB file, eight of 4 MiB and 256 of
// 16 KiB in 16 directories.
func benchLayer(b *testing.B) string {
	b.Helper()
	dir := newLayer(b, baseA)
	put(b, dir, "var/lib/db.bin", randBytes(1, 64<<20), 0o644, baseA, 0)
	for i := range 8 {
		put(b, dir, fmt.Sprintf("opt/app/lib%d.so", i), randBytes(uint64(10+i), 4<<20), 0o755, baseA, 0)
	}
	for i := range 256 {
		put(b, dir, fmt.Sprintf("home/user/src/d%02d/f%03d.py", i%16, i), randBytes(uint64(100+i), 16<<10), 0o644, baseA, 1000)
	}
	return dir
}

func BenchmarkCreate(b *testing.B) {
	requireRoot(b)
	src := benchLayer(b)
	b.Run("first", func(b *testing.B) {
		b.SetBytes(benchLayerSize)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dir := filepath.Join(b.TempDir(), "store")
			s, err := Open(dir)
			must(b, err)
			b.StartTimer()
			if _, err := s.Create(context.Background(), src, baseA, meta("sb_one")); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			must(b, os.RemoveAll(dir))
			b.StartTimer()
		}
	})
	b.Run("second", func(b *testing.B) {
		s := newStore(b)
		_, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
		must(b, err)
		b.SetBytes(benchLayerSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
			if err != nil {
				b.Fatal(err)
			}
			if m.StoredSize != 0 {
				b.Fatalf("second snapshot stored %d bytes", m.StoredSize)
			}
		}
	})
}

func BenchmarkRestore(b *testing.B) {
	requireRoot(b)
	s := newStore(b)
	m, err := s.Create(context.Background(), benchLayer(b), baseA, meta("sb_one"))
	must(b, err)
	parent := b.TempDir()
	b.SetBytes(benchLayerSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(parent, "restored")
		if err := s.Restore(context.Background(), m.ID, dst, baseB); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		must(b, os.RemoveAll(dst))
		b.StartTimer()
	}
}

// BenchmarkCopyBaseline is what the disk allows for the same layer: `cp -a` of the tree
// and a sync of its file system, with nothing hashed or deduplicated.
func BenchmarkCopyBaseline(b *testing.B) {
	requireRoot(b)
	if _, err := exec.LookPath("cp"); err != nil {
		b.Skip("needs cp")
	}
	src := benchLayer(b)
	parent := b.TempDir()
	b.SetBytes(benchLayerSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(parent, "copy")
		if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		if out, err := exec.Command("sync", "-f", dst).CombinedOutput(); err != nil {
			b.Fatalf("sync: %v: %s", err, out)
		}
		b.StopTimer()
		must(b, os.RemoveAll(dst))
		b.StartTimer()
	}
}
