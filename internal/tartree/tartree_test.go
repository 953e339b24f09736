package tartree

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv/dirtree"
)

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestPackExtractRoundTrip(t *testing.T) {
	src := t.TempDir()
	write := func(name, body string, mode fs.FileMode) {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("a b/with space.txt", "space", 0o644)
	write("new\nline", "newline", 0o600)
	write("ünï/cödé ☃", "unicode", 0o755)
	write("-leading-dash", "dash", 0o640)
	write("ro/readonly", "ro", 0o444)
	for _, d := range []string{"empty", "deep/er/est"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "empty"), 0o711); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"in": "a b/with space.txt", "out": "/etc/passwd", "up": "../../x", "dirlink": "deep"} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	sum, err := Pack(openRoot(t, src), &buf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Files: 5, Dirs: 7, Links: 4, Bytes: int64(len("spacenewlineunicodedashro"))}); sum != want {
		t.Errorf("Pack summary = %+v; want %+v", sum, want)
	}
	dst := t.TempDir()
	got, err := Extract(openRoot(t, dst), &buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got != sum {
		t.Errorf("Extract summary = %+v; want Pack's %+v", got, sum)
	}
	dirtree.Diff(t, dirtree.Describe(t, src), dirtree.Describe(t, dst))
}

// entry is one crafted tar entry.
type entry struct {
	name, link string
	typ        byte
	size       int64
	body       string
	mode       int64
}

func craft(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		size := e.size
		if e.typ == tar.TypeReg && size == 0 {
			size = int64(len(e.body))
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Size: size, Mode: mode, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tw.Flush() // no Close: a header whose size has no data behind it must stay that way
	if last := entries[len(entries)-1]; last.typ != tar.TypeReg || int64(len(last.body)) == last.size || last.size == 0 {
		buf.Write(make([]byte, 1024))
	}
	return &buf
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		reason  string
	}{
		{"dotdot", []entry{{name: "../x", typ: tar.TypeReg, body: "pwned"}}, `".." element`},
		{"dotdot inside", []entry{{name: "a/../../x", typ: tar.TypeReg, body: "pwned"}}, `".." element`},
		{"absolute", []entry{{name: "/etc/x", typ: tar.TypeReg, body: "pwned"}}, "absolute name"},
		{"symlink then file through it", []entry{{name: "l", link: "../outside", typ: tar.TypeSymlink}, {name: "l/x", typ: tar.TypeReg, body: "pwned"}}, `symbolic link "l"`},
		{"symlink inside then file through it", []entry{{name: "d/", typ: tar.TypeDir}, {name: "l", link: "d", typ: tar.TypeSymlink}, {name: "l/x", typ: tar.TypeReg, body: "pwned"}}, `symbolic link "l"`},
		{"symlink then dir through it", []entry{{name: "l", link: "../outside", typ: tar.TypeSymlink}, {name: "l/sub/", typ: tar.TypeDir}}, `symbolic link "l"`},
		{"hardlink out", []entry{{name: "h", link: "../outside/secret", typ: tar.TypeLink}}, "hard link"},
		{"hardlink absolute", []entry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}, "hard link"},
		{"hardlink to a link", []entry{{name: "l", link: "../outside/secret", typ: tar.TypeSymlink}, {name: "h", link: "l", typ: tar.TypeLink}}, "hard link"},
		{"char device", []entry{{name: "null", typ: tar.TypeChar}}, "device node"},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock}}, "device node"},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, "FIFO"},
		{"huge declared size", []entry{{name: "big", typ: tar.TypeReg, size: 1 << 40}}, "limit of"},
		{"negative-free long name", []entry{{name: strings.Repeat("a/", 300) + "f", typ: tar.TypeReg, body: "x"}}, "elements deep"},
		{"long element", []entry{{name: strings.Repeat("n", 300), typ: tar.TypeReg, body: "x"}}, "element of 300 bytes"},
		{"too long", []entry{{name: strings.Repeat("abcdefgh/", 500), typ: tar.TypeDir}}, "name of 4500 bytes"},
		{"truncated file", []entry{{name: "short", typ: tar.TypeReg, size: 100, body: ""}}, "stream ended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside, dst := filepath.Join(base, "outside"), filepath.Join(base, "dst")
			for _, d := range []string{outside, dst} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := dirtree.Describe(t, outside)
			_, err := Extract(openRoot(t, dst), craft(t, tc.entries...), Options{})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("Extract: err = %v; want a refusal naming %q", err, tc.reason)
			}
			if after := dirtree.Describe(t, outside); len(after) != len(before) || after["secret"] != before["secret"] {
				t.Errorf("outside the directory: %v; want %v untouched", after, before)
			}
			if ents, _ := os.ReadDir(base); len(ents) != 2 {
				t.Errorf("beside the directory: %d entries; want only outside and dst", len(ents))
			}
			if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "secret" {
				t.Errorf("outside/secret = %q, %v; want it unchanged", b, err)
			}
			if _, err := os.Stat(filepath.Join(dst, "big")); err == nil {
				t.Errorf("the file of a refused declared size was created")
			}
		})
	}
}

// TestExtractEntryLimit streams a million entries at a limit of a thousand: the
// refusal comes at the limit, having read no more than it.
func TestExtractEntryLimit(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for i := range 1_000_000 {
			if err := tw.WriteHeader(&tar.Header{Name: "f" + string(rune('a'+i%26)), Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	defer pr.Close()
	dst := t.TempDir()
	sum, err := Extract(openRoot(t, dst), pr, Options{Limits: Limits{MaxEntries: 1000}})
	var te *Error
	if !errors.As(err, &te) || !te.Limit || !strings.Contains(err.Error(), "more than 1000 entries") {
		t.Fatalf("Extract of a million entries: err = %v; want the entry limit named", err)
	}
	if sum.Files != 1000 {
		t.Errorf("files made = %d; want 1000, the limit", sum.Files)
	}
}

func TestExtractDropsSetuid(t *testing.T) {
	dst := t.TempDir()
	if _, err := Extract(openRoot(t, dst), craft(t, entry{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o6755}), Options{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "suid"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v; want 0755 without setuid or setgid", fi.Mode())
	}
}

func TestExtractReplacesLinkWithFile(t *testing.T) {
	base := t.TempDir()
	dst := filepath.Join(base, "dst")
	os.Mkdir(dst, 0o755)
	target := filepath.Join(base, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	if err := os.Symlink(target, filepath.Join(dst, "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(openRoot(t, dst), craft(t, entry{name: "f", typ: tar.TypeReg, body: "new"}), Options{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target = %q; want it untouched (the link replaced, not written through)", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "new" {
		t.Errorf("f = %q; want new", b)
	}
	names := []string{}
	ents, _ := os.ReadDir(dst)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "f" {
		t.Errorf("dst holds %v; want [f]", names)
	}
}
