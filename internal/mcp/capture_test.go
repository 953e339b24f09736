package mcp

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// feed writes data to a new capture in chunks of size chunk (all at once when 0).
func feed(limit int, maxFull int64, data []byte, chunk int) *capture {
	c := newCapture(limit, maxFull)
	if chunk <= 0 {
		chunk = len(data) + 1
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		c.Write(data[:n])
		data = data[n:]
	}
	return c
}

// checkCapture checks what a capture of data shows and keeps.
func checkCapture(t *testing.T, c *capture, data []byte, maxFull int64) {
	t.Helper()
	defer c.close()
	if c.total != int64(len(data)) {
		t.Errorf("total = %d, want %d", c.total, len(data))
	}
	if got, want := c.truncated(), len(data) > c.limit; got != want {
		t.Fatalf("truncated = %v, want %v", got, want)
	}
	shown := c.shown("<cut>")
	if !c.truncated() {
		if utf8.Valid(data) && shown != string(data) {
			t.Errorf("shown = %q, want all of %q", shown, data)
		}
		return
	}
	head, tail := c.head(), c.tail()
	if !bytes.HasPrefix(data, head) || len(head) > c.headSize() || len(head) < c.headSize()-utf8.UTFMax {
		t.Errorf("head: %d bytes, want a prefix of about %d", len(head), c.headSize())
	}
	if !bytes.HasSuffix(data, tail) || len(tail) > c.tailSize() || len(tail) < c.tailSize()-utf8.UTFMax {
		t.Errorf("tail: %d bytes, want a suffix of about %d", len(tail), c.tailSize())
	}
	if !strings.Contains(shown, "<cut>") {
		t.Errorf("shown %q has no note", shown)
	}
	if utf8.Valid(data) && !utf8.ValidString(shown) {
		t.Errorf("shown %q is not valid UTF-8 though the stream was", shown)
	}
	f, size, err := c.fullFile()
	if err != nil {
		t.Fatalf("fullFile: %v", err)
	}
	full, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want := data[:min(int64(len(data)), maxFull)]
	if int64(len(full)) != size || !bytes.Equal(full, want) {
		t.Errorf("full file: %d bytes (size %d), want the first %d bytes of the stream", len(full), size, len(want))
	}
}

func TestCapture(t *testing.T) {
	ascii := []byte(strings.Repeat("0123456789abcdef\n", 1000))
	multi := []byte(strings.Repeat("é世😀a", 500)) // 2-, 3- and 4-byte sequences
	for _, tc := range []struct {
		name    string
		limit   int
		maxFull int64
		data    []byte
		chunk   int
	}{
		{"empty", 64, 1 << 20, nil, 0},
		{"under the limit", 64, 1 << 20, ascii[:63], 0},
		{"at the limit", 64, 1 << 20, ascii[:64], 7},
		{"one byte over", 64, 1 << 20, ascii[:65], 0},
		{"far over, one write", 100, 1 << 20, ascii, 0},
		{"far over, small writes", 100, 1 << 20, ascii, 3},
		{"far over, large writes", 100, 1 << 20, ascii, 4096},
		{"full copy capped", 100, 1000, ascii, 10},
		{"multi-byte, odd limit", 101, 1 << 20, multi, 5},
		{"multi-byte, every cut", 33, 1 << 20, multi, 1},
		{"binary", 50, 1 << 20, bytes.Repeat([]byte{0xff, 0x00, 0x80}, 100), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkCapture(t, feed(tc.limit, tc.maxFull, tc.data, tc.chunk), tc.data, tc.maxFull)
		})
	}
}

func FuzzCapture(f *testing.F) {
	f.Add([]byte("hello, world\n"), uint8(4), uint8(3))
	f.Add([]byte(strings.Repeat("é世😀", 10)), uint8(17), uint8(1))
	// A truncated capture keeps the whole stream in a temporary file: on tmpfs where
	// there is one, since on a busy disk creating it costs more than the rest.
	if shm, err := os.MkdirTemp("/dev/shm", "airlock-fuzz-"); err == nil {
		f.Cleanup(func() { os.RemoveAll(shm) })
		f.Setenv("TMPDIR", shm)
	}
	f.Fuzz(func(t *testing.T, data []byte, limit, chunk uint8) {
		// Four times the largest limit: a longer stream reaches nothing new and takes
		// long to minimize.
		if len(data) > 256 {
			return
		}
		l := int(limit%64) + 2
		checkCapture(t, feed(l, 1<<20, data, int(chunk)), data, 1<<20)
	})
}

func TestTrimPartialRune(t *testing.T) {
	s := []byte("a世b") // 世 is e4 b8 96
	for _, tc := range []struct {
		in, wantEnd, wantStart []byte
	}{
		{s[:2], s[:1], s[:2]},
		{s[:3], s[:1], s[:3]},
		{s[:4], s[:4], s[:4]},
		{s[2:], s[2:], s[4:]},
		{s[3:], s[3:], s[4:]},
		{[]byte{0xff, 0xfe}, []byte{0xff, 0xfe}, []byte{0xff, 0xfe}},
	} {
		if got := trimPartialRuneEnd(tc.in); !bytes.Equal(got, tc.wantEnd) {
			t.Errorf("trimPartialRuneEnd(%x) = %x, want %x", tc.in, got, tc.wantEnd)
		}
		if got := trimPartialRuneStart(tc.in); !bytes.Equal(got, tc.wantStart) {
			t.Errorf("trimPartialRuneStart(%x) = %x, want %x", tc.in, got, tc.wantStart)
		}
	}
}
