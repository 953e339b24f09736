package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"a", "a", true},
		{"./a/b/", "a/b", true},
		{"a//b/./c", "a/b/c", true},
		{"a/../b", "b", true},
		{"./", ".", true},
		{".", ".", true},
		{"", "", false},
		{"/etc/passwd", "", false},
		{"..", "", false},
		{"../x", "", false},
		{"a/../../x", "", false},
		{"./../x", "", false},
		{"a\x00b", "", false},
	} {
		got, err := cleanName(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("cleanName(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("cleanName(%q) error %v is not invalid_argument", tc.in, err)
		}
	}
}

func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"a", "./a/b", "../a", "/abs", "a/../../b", ".", "a/./b//c/", "..a/b..", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		// Longer names repeat what shorter ones reach, and take long to minimize.
		if len(name) > 128 {
			return
		}
		got, err := cleanName(name)
		if err != nil {
			return
		}
		if got == "." {
			return
		}
		if strings.HasPrefix(got, "/") || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("cleanName(%q) = %q: absolute or NUL", name, got)
		}
		for _, c := range strings.Split(got, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("cleanName(%q) = %q: bad component %q", name, got, c)
			}
		}
		if j := path.Join("/root", got); !strings.HasPrefix(j, "/root/") {
			t.Fatalf("cleanName(%q) = %q escapes: %s", name, got, j)
		}
	})
}

// unpackTar unpacks b into a fresh directory and returns it.
func unpackTar(t *testing.T, b []byte) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, unpackLayer(context.Background(), bytes.NewReader(b), dir, nil)
}

func TestUnpackKeepsMetadata(t *testing.T) {
	requireRoot(t)
	owned := fileEnt("usr/bin/tool", "#!/bin/sh\n", 0o4755)
	owned.Uid, owned.Gid = 1234, 5678
	xattr := fileEnt("data", "x", 0o640)
	xattr.PAXRecords = map[string]string{
		"SCHILY.xattr.user.note":           "hi",
		"SCHILY.xattr.trusted.overlay.foo": "no",
		"SCHILY.xattr.security.capability": "no",
	}
	sdir := dirEnt("shared/", 0o3775)
	sdir.Gid = 50
	dev := ent{Header: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}}
	wh := ent{Header: tar.Header{Typeflag: tar.TypeChar, Name: "gone", Mode: 0}}
	fifo := ent{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o600, ModTime: testTime}}
	dir, err := unpackTar(t, mkTar(t,
		dirEnt("./", 0o755), dirEnt("usr/", 0o755), owned, sdir, xattr,
		symlinkEnt("link", "/usr/bin/tool"), hardlinkEnt("hard", "usr/bin/tool"),
		dev, wh, fifo,
		fileEnt("replaced", "first", 0o644), fileEnt("replaced", "second", 0o600),
	))
	if err != nil {
		t.Fatalf("unpack: %v", err)
	}
	st := lstat(t, filepath.Join(dir, "usr/bin/tool"))
	if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o7777 != 0o4755 {
		t.Errorf("usr/bin/tool: owner %d:%d mode %o, want 1234:5678 4755", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if got := st.Mtim.Sec; got != testTime.Unix() {
		t.Errorf("usr/bin/tool mtime %d, want %d", got, testTime.Unix())
	}
	if got := lstat(t, filepath.Join(dir, "usr/bin")); got.Mode&0o7777 != 0o755 || got.Uid != 0 {
		t.Errorf("implicit parent usr/bin: mode %o uid %d, want 755 0", got.Mode&0o7777, got.Uid)
	}
	if got := lstat(t, filepath.Join(dir, "usr")); got.Mtim.Sec != testTime.Unix() {
		t.Errorf("dir usr mtime %d, want %d (set after its children)", got.Mtim.Sec, testTime.Unix())
	}
	if got := lstat(t, filepath.Join(dir, "shared")); got.Mode&0o7777 != 0o3775 || got.Gid != 50 {
		t.Errorf("shared: mode %o gid %d, want 3775 50", got.Mode&0o7777, got.Gid)
	}
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "/usr/bin/tool" {
		t.Errorf("link -> %q, %v; want /usr/bin/tool", target, err)
	}
	if h := lstat(t, filepath.Join(dir, "hard")); h.Ino != st.Ino || h.Nlink != 2 {
		t.Errorf("hard: inode %d nlink %d, want inode %d nlink 2", h.Ino, h.Nlink, st.Ino)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "data"), "user.note", buf); err != nil || string(buf[:n]) != "hi" {
		t.Errorf("user.note xattr = %q, %v; want hi", buf[:n], err)
	}
	for _, x := range []string{"trusted.overlay.foo", "security.capability"} {
		if _, err := unix.Lgetxattr(filepath.Join(dir, "data"), x, buf); err == nil {
			t.Errorf("xattr %s was applied from the archive", x)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/null")); err == nil {
		t.Error("device node dev/null was created")
	}
	if st := lstat(t, filepath.Join(dir, "gone")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone: mode %o rdev %d, want a 0:0 char device", st.Mode, st.Rdev)
	}
	if st := lstat(t, filepath.Join(dir, "pipe")); st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("pipe: mode %o, want a fifo", st.Mode)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "replaced")); string(b) != "second" {
		t.Errorf("replaced = %q, want the later entry", b)
	}
}

func TestUnpackWhiteouts(t *testing.T) {
	requireRoot(t)
	dir, err := unpackTar(t, mkTar(t,
		dirEnt("etc/", 0o755), fileEnt("etc/.wh.motd", "", 0o644),
		dirEnt("var/cache/", 0o755), fileEnt("var/cache/.wh..wh..opq", "", 0o644),
		fileEnt("opt/.wh..wh.plnk", "", 0o644),
	))
	if err != nil {
		t.Fatalf("unpack: %v", err)
	}
	if st := lstat(t, filepath.Join(dir, "etc/motd")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/motd: mode %o rdev %d, want a 0:0 char device", st.Mode, st.Rdev)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("var/cache opaque xattr = %q, %v; want y", buf[:n], err)
	}
	for _, p := range []string{"etc/.wh.motd", "var/cache/.wh..wh..opq", "opt/.wh..wh.plnk"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was written literally", p)
		}
	}
}

// TestUnpackAttacks feeds layers that try to write outside their directory.
func TestUnpackAttacks(t *testing.T) {
	requireRoot(t)
	sentinel := t.TempDir()
	victim := writeFile(t, sentinel, "victim", []byte("original"))
	for _, tc := range []struct {
		name string
		ents []ent
	}{
		{"symlink parent", []ent{symlinkEnt("a", sentinel), fileEnt("a/pwned", "x", 0o644)}},
		{"symlink parent overwrite", []ent{symlinkEnt("a", sentinel), fileEnt("a/victim", "x", 0o644)}},
		{"relative symlink parent", []ent{symlinkEnt("a", "../../../../../../.."+sentinel), fileEnt("a/pwned", "x", 0o644)}},
		{"nested symlink parent", []ent{dirEnt("d/", 0o755), symlinkEnt("d/e", "/"), fileEnt("d/e"+sentinel+"/pwned", "x", 0o644)}},
		{"dotdot", []ent{fileEnt("../../../../../../.."+sentinel+"/pwned", "x", 0o644)}},
		{"inner dotdot", []ent{fileEnt("a/../../../../../../../.."+sentinel+"/pwned", "x", 0o644)}},
		{"absolute", []ent{fileEnt(sentinel+"/pwned", "x", 0o644)}},
		{"hardlink dotdot", []ent{hardlinkEnt("h", "../../../../../../.."+victim)}},
		{"hardlink absolute", []ent{hardlinkEnt("h", victim)}},
		{"hardlink through symlink", []ent{symlinkEnt("s", sentinel), hardlinkEnt("h", "s/victim")}},
		{"whiteout through symlink", []ent{symlinkEnt("s", sentinel), fileEnt("s/.wh.victim", "", 0o644)}},
		{"opaque through symlink", []ent{symlinkEnt("s", sentinel), fileEnt("s/.wh..wh..opq", "", 0o644)}},
		{"dir through symlink", []ent{symlinkEnt("s", sentinel), dirEnt("s/sub/", 0o755)}},
		{"whiteout dotdot", []ent{fileEnt(".wh...", "", 0o644)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unpackTar(t, mkTar(t, tc.ents...))
			if err == nil {
				t.Fatal("unpack succeeded, want an error")
			}
			t.Logf("refused: %v", err)
			if got := entries(t, sentinel); len(got) != 1 || got[0] != "victim" {
				t.Errorf("sentinel dir now holds %v", got)
			}
			if b, _ := os.ReadFile(victim); string(b) != "original" {
				t.Errorf("victim now %q", b)
			}
			st := lstat(t, victim)
			if st.Nlink != 1 {
				t.Errorf("victim has %d links", st.Nlink)
			}
			buf := make([]byte, 4)
			if _, err := unix.Lgetxattr(sentinel, opaqueXattr, buf); err == nil {
				t.Error("sentinel got the opaque xattr")
			}
		})
	}
}

// layerScript builds a layer tar from a compact description, so that the fuzzer mutates
// entries rather than 512-byte headers and their checksums, and minimizes what it finds
// in moments: the cost of minimizing an input grows with the square of its length. One
// entry a line: a type flag byte followed by
//
//	name [arg [mode [uid [xattr=value [size]]]]]
//
// where arg is a regular file's contents, any other entry's link name and a device's
// major and minor number, mode is octal (default 644), uid is also the gid, the xattr
// becomes a PAX SCHILY.xattr record, and a size larger than the contents makes the
// header claim it and cuts the archive there.
// A line "#bytes" puts bytes into the stream as they are, between entries. It reports
// false for a description tar.Writer refuses to write.
func layerScript(script string) ([]byte, bool) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, line := range strings.Split(script, "\n") {
		if line == "" {
			continue
		}
		if line[0] == '#' {
			if tw.Flush() != nil {
				return nil, false
			}
			buf.WriteString(line[1:])
			continue
		}
		f := strings.Split(line[1:], " ")
		field := func(i int) string {
			if i < len(f) {
				return f[i]
			}
			return ""
		}
		h := tar.Header{Typeflag: line[0], Name: f[0], Mode: 0o644, ModTime: testTime, Format: tar.FormatPAX}
		body := ""
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			body = field(1)
			h.Size = int64(len(body))
		} else {
			h.Linkname = field(1)
		}
		if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
			h.Devmajor, _ = strconv.ParseInt(field(1), 10, 64)
			h.Devminor = h.Devmajor
		}
		if m, err := strconv.ParseInt(field(2), 8, 64); err == nil {
			h.Mode = m
		}
		if id, err := strconv.Atoi(field(3)); err == nil {
			h.Uid, h.Gid = id, id
		}
		if k, v, ok := strings.Cut(field(4), "="); ok {
			h.PAXRecords = map[string]string{"SCHILY.xattr." + k: v}
		}
		claim, _ := strconv.ParseInt(field(5), 10, 64)
		cut := claim > h.Size
		if cut {
			h.Size = claim
		}
		if tw.WriteHeader(&h) != nil {
			return nil, false
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, false
		}
		if cut {
			return buf.Bytes(), true
		}
	}
	if tw.Close() != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// FuzzUnpackLayer unpacks arbitrary layers: whatever happens, nothing may appear beside
// the layer directory. The archives come from layerScript; a malformed tar stream is
// archive/tar's to refuse, and the "#" lines of a script still put garbage in the way.
func FuzzUnpackLayer(f *testing.F) {
	for _, s := range []string{
		"0../x x",
		"2a ..\n0a/x x",
		"2a /\n5a/x/",
		"0f x\n1h ../f",
		"5d/ - 755\n0d/.wh..wh..opq\n0d/.wh.x",
		"0usr/bin/tool x 4755 1234 user.note=hi",
		"3dev/null 1 666\n3gone - 0\n6pipe - 600\n5./ - 755 0 trusted.overlay.opaque=y",
		"0big - 644 0 - 99999999",
		"5d\n#garbage\n0d/x x",
	} {
		f.Add(s)
	}
	if os.Geteuid() != 0 {
		f.Skip("needs root")
	}
	// One directory for every input, emptied after each: a temporary directory per
	// input costs more than most unpacks. On tmpfs where there is one: an unpack there
	// costs a tenth of one on a disk's journal.
	parent := f.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "airlock-fuzz-"); err == nil {
		f.Cleanup(func() { os.RemoveAll(shm) })
		parent = shm
	}
	dir := filepath.Join(parent, "layer")
	f.Fuzz(func(t *testing.T, script string) {
		// Room for a few entries, or one whose name needs a PAX record (over 100 bytes);
		// a longer script reaches nothing new and takes long to minimize.
		if len(script) > 128 {
			return
		}
		b, ok := layerScript(script)
		if !ok {
			return
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		// As a node unpacks: within a budget, here 1 MiB, so that a header that claims
		// gigabytes (of a sparse file's holes, say) is refused, not written out.
		bud := &budget{left: 1 << 20, limit: 1 << 20}
		unpackLayer(context.Background(), bytes.NewReader(b), dir, bud)
		if got := entries(t, parent); len(got) != 1 || got[0] != "layer" {
			t.Fatalf("unpack wrote beside the layer: %v", got)
		}
	})
}
