package image

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWriteFileDataKeepsHoles(t *testing.T) {
	data := func(n int) []byte { b := make([]byte, n); rand.Read(b); return b }
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name      string
		content   []byte
		maxBlocks int64 // 512-byte blocks the file may use at most; -1: no bound
	}{
		{"empty", nil, 0},
		{"small", data(100), -1},
		{"zeros only", zeros(8 << 20), 8},
		{"hole in the middle", cat(data(5000), zeros(4<<20), data(3000)), 64},
		{"hole at the end", cat(data(4096), zeros(3<<20)), 24},
		{"hole across reads", cat(data(1<<20-100), zeros(2<<20), data(10)), 2200},
		{"zeros not aligned", cat(data(10), zeros(4000), data(10)), -1},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, string(rune('a'+i)))
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			n, err := writeFileData(f, bytes.NewReader(tc.content))
			f.Close()
			if err != nil || n != int64(len(tc.content)) {
				t.Fatalf("writeFileData = %d, %v; want %d, nil", n, err, len(tc.content))
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.content) {
				t.Fatalf("file holds %d bytes that differ from the %d written", len(got), len(tc.content))
			}
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if tc.maxBlocks >= 0 && st.Blocks > tc.maxBlocks {
				t.Errorf("file uses %d blocks of 512 bytes, want at most %d (its zeros were written, not left as holes)", st.Blocks, tc.maxBlocks)
			}
		})
	}
}
