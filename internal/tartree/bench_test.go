package tartree

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkPackExtract packs the tree at $TARTREE_BENCH_SRC and unpacks it into a
// fresh directory, as a tree copy does on each side.
func BenchmarkPackExtract(b *testing.B) {
	src := os.Getenv("TARTREE_BENCH_SRC")
	if src == "" {
		b.Skip("set TARTREE_BENCH_SRC to a directory tree")
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	for b.Loop() {
		var buf bytes.Buffer
		if _, err := Pack(root, &buf, nil, nil); err != nil {
			b.Fatal(err)
		}
		dst := b.TempDir()
		r, err := os.OpenRoot(dst)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Extract(r, &buf, Options{}); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}
