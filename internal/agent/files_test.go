package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

func TestFileRoundTrip(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	content := bytes.Repeat([]byte("airlock "), 20000) // 160 KB: several frames
	n, err := c.Upload(ctx, "/a/b/c.txt", 0o600, -1, -1, bytes.NewReader(content))
	if err != nil || n != int64(len(content)) {
		t.Fatalf("Upload: got %d, %v; want %d, nil", n, err, len(content))
	}
	fi, err := os.Stat(filepath.Join(root, "a/b/c.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != int64(len(content)) {
		t.Errorf("file on disk: got %v, %v; want mode 0600 and %d bytes", fi, err, len(content))
	}
	var got bytes.Buffer
	n, err = c.Download(ctx, "/a/b/c.txt", &got)
	if err != nil || n != int64(len(content)) || !bytes.Equal(got.Bytes(), content) {
		t.Errorf("Download: got %d bytes, %v; want the %d bytes uploaded", n, err, len(content))
	}
	// Parts: from an offset, for a length; to the end; past the end (empty).
	for _, part := range []struct{ off, n, wantOff, wantEnd int64 }{
		{5, 7, 5, 12}, {int64(len(content)) - 3, 0, int64(len(content)) - 3, int64(len(content))},
		{0, 1 << 20, 0, int64(len(content))}, {int64(len(content)) + 10, 4, 0, 0},
	} {
		got.Reset()
		n, err := c.DownloadRange(ctx, "/a/b/c.txt", part.off, part.n, &got)
		if want := content[part.wantOff:part.wantEnd]; err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
			t.Errorf("DownloadRange(%d, %d): %d bytes %q…, %v; want %d bytes", part.off, part.n, n, got.Bytes()[:min(got.Len(), 16)], err, len(want))
		}
	}
	if _, err := c.DownloadRange(ctx, "/a/b/c.txt", -1, 0, io.Discard); err == nil {
		t.Error("DownloadRange from a negative offset was not refused")
	}
	st, err := c.Stat(ctx, "/a/b/c.txt")
	if err != nil || st.Name != "c.txt" || st.Size != int64(len(content)) || st.Mode != 0o600 || st.IsDir {
		t.Errorf("Stat: got %+v, %v; want c.txt, %d bytes, mode 0600, not a dir", st, err, len(content))
	}
	// Overwrite atomically; no temporary file is left behind.
	if _, err := c.Upload(ctx, "/a/b/c.txt", 0, -1, -1, strings.NewReader("new")); err != nil {
		t.Fatalf("Upload over: %v", err)
	}
	list, err := c.List(ctx, "/a/b")
	if err != nil || len(list) != 1 || list[0].Name != "c.txt" || list[0].Size != 3 || list[0].Mode != 0o644 {
		t.Errorf("List: got %+v, %v; want only c.txt, 3 bytes, mode 0644", list, err)
	}
	empty, err := c.Upload(ctx, "/empty", 0, -1, -1, strings.NewReader(""))
	if err != nil || empty != 0 {
		t.Errorf("Upload empty: got %d, %v; want 0, nil", empty, err)
	}
	root1, err := c.Stat(ctx, "/")
	if err != nil || !root1.IsDir {
		t.Errorf("Stat /: got %+v, %v; want a directory", root1, err)
	}
}

func TestUploadOwner(t *testing.T) {
	require(t, os.Geteuid() == 0, "chown needs root")
	c, root := startAgent(t, Options{})
	if _, err := c.Upload(ctxT(t), "/owned", 0o640, 1234, 5678, strings.NewReader("x")); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	fi, err := os.Stat(filepath.Join(root, "owned"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 1234 || st.Gid != 5678 || fi.Mode().Perm() != 0o640 {
		t.Errorf("got uid %d gid %d mode %o, want 1234 5678 640", st.Uid, st.Gid, fi.Mode().Perm())
	}
}

func TestMkdirRemove(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	steps := []struct {
		name string
		do   func() error
		code string // "" means success
	}{
		{"mkdir without parent", func() error { return c.Mkdir(ctx, "/d/e", false) }, "not_found"},
		{"mkdir -p", func() error { return c.Mkdir(ctx, "/d/e/f", true) }, ""},
		{"mkdir -p again", func() error { return c.Mkdir(ctx, "/d/e/f", true) }, ""},
		{"mkdir existing", func() error { return c.Mkdir(ctx, "/d/e", false) }, "already_exists"},
		{"mkdir /", func() error { return c.Mkdir(ctx, "/", false) }, "already_exists"},
		{"upload file", func() error {
			_, err := c.Upload(ctx, "/d/e/f/file", 0, -1, -1, strings.NewReader("x"))
			return err
		}, ""},
		{"mkdir -p through a file", func() error { return c.Mkdir(ctx, "/d/e/f/file/g", true) }, "invalid_argument"},
		{"remove non-empty", func() error { return c.Remove(ctx, "/d", false) }, "failed_precondition"},
		{"remove file", func() error { return c.Remove(ctx, "/d/e/f/file", false) }, ""},
		{"remove empty dir", func() error { return c.Remove(ctx, "/d/e/f", false) }, ""},
		{"remove -r", func() error { return c.Remove(ctx, "/d", true) }, ""},
		{"remove missing", func() error { return c.Remove(ctx, "/d", true) }, "not_found"},
		{"remove /", func() error { return c.Remove(ctx, "/", true) }, "invalid_argument"},
		{"download dir", func() error { _, err := c.Download(ctx, "/", io.Discard); return err }, "invalid_argument"},
		{"download missing", func() error { _, err := c.Download(ctx, "/nope", io.Discard); return err }, "not_found"},
		{"list missing", func() error { _, err := c.List(ctx, "/nope"); return err }, "not_found"},
		{"stat missing", func() error { _, err := c.Stat(ctx, "/nope"); return err }, "not_found"},
	}
	for _, st := range steps {
		err := st.do()
		if st.code == "" {
			if err != nil {
				t.Errorf("%s: %v", st.name, err)
			}
			continue
		}
		wantCode(t, st.name, err, st.code)
	}
	if _, err := os.Stat(filepath.Join(root, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/d still exists after remove -r: %v", err)
	}
	if _, err := c.Stat(ctx, "/nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("errors.Is(stat missing, ErrNotFound) = false; err %v", err)
	}
}

func TestBadPathsRefused(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := ctxT(t)
	for _, p := range []string{"", "relative", "/a/../b", "/..", "/a/./b", "/a//b", "/a/"} {
		_, err := c.Stat(ctx, p)
		wantCode(t, "stat "+p, err, "invalid_argument")
		var re *agentproto.RemoteError
		if errors.As(err, &re) && !strings.Contains(re.Message, "absolute and clean") {
			t.Errorf("stat %q: message %q does not state the rule", p, re.Message)
		}
		_, err = c.Upload(ctx, p, 0, -1, -1, strings.NewReader("x"))
		wantCode(t, "upload "+p, err, "invalid_argument")
	}
}

// TestSymlinksStayInRoot: symlinks that point outside the root resolve inside it; nothing
// outside is read, written or removed.
func TestSymlinksStayInRoot(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", 20)
	links := map[string]string{
		"abs":  outside,
		"rel":  up + strings.TrimPrefix(outside, "/"),
		"file": secret,
		"in":   "/inside",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "inside", "ok.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"/abs/secret.txt", "/rel/secret.txt", "/file"} {
		var got bytes.Buffer
		_, err := c.Download(ctx, p, &got)
		wantCode(t, "download "+p, err, "not_found")
		if got.Len() > 0 {
			t.Errorf("download %s leaked %q from outside the root", p, got.String())
		}
		// Stat describes a link whose target is missing (in the root) as the link itself.
		if st, err := c.Stat(ctx, p); err == nil && !st.IsSymlink {
			t.Errorf("stat %s: got %+v, want not found or the dangling link itself", p, st)
		} else if err != nil {
			wantCode(t, "stat "+p, err, "not_found")
		}
	}
	for _, p := range []string{"/abs/pwn.txt", "/rel/pwn.txt", "/file"} {
		_, _ = c.Upload(ctx, p, 0, -1, -1, strings.NewReader("pwned"))
		_, _ = c.UploadInPlace(ctx, p, 0, -1, -1, strings.NewReader("pwned"))
	}
	for _, p := range []string{"/abs/secret.txt", "/rel/secret.txt"} {
		_ = c.Remove(ctx, p, true)
	}
	_ = c.Mkdir(ctx, "/abs/newdir", true)
	if _, err := c.List(ctx, "/abs"); err == nil {
		// /abs resolves to root+outside, which may now exist inside the root; fine as
		// long as the real outside directory is untouched (checked below).
		t.Logf("/abs now resolves to a directory inside the root")
	}

	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "secret.txt" {
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("outside directory changed: got %v, want only secret.txt", names)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "secret" {
		t.Errorf("outside file changed: got %q, %v", b, err)
	}
	// The symlink named by /file was replaced, not followed.
	if fi, err := os.Lstat(filepath.Join(root, "file")); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("upload to /file: got %v, %v; want a regular file replacing the link", fi, err)
	}

	// A symlink inside the root works as usual.
	var got bytes.Buffer
	if _, err := c.Download(ctx, "/in/ok.txt", &got); err != nil || got.String() != "inside" {
		t.Errorf("download via inside link: got %q, %v; want %q", got.String(), err, "inside")
	}
	st, err := c.Stat(ctx, "/in")
	if err != nil || !st.IsDir {
		t.Errorf("stat /in: got %+v, %v; want the directory it points to", st, err)
	}
	list, err := c.List(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range list {
		if fi.Name == "in" && !fi.IsSymlink {
			t.Errorf("list /: entry %+v is not marked as a symlink", fi)
		}
	}
	// Removing a link removes the link, not its target.
	if err := c.Remove(ctx, "/in", true); err != nil {
		t.Errorf("remove /in: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "inside", "ok.txt")); err != nil {
		t.Errorf("removing the link /in removed its target: %v", err)
	}
}

func TestRename(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	writeFile(t, filepath.Join(root, "a", "x"), "x")
	writeFile(t, filepath.Join(root, "a", "other"), "other")
	writeFile(t, filepath.Join(root, "full", "f"), "f")
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name, from, to string
		code           string // "" means success
	}{
		{"file", "/a/x", "/a/y", ""},
		{"over a file", "/a/y", "/a/other", ""},
		{"missing source", "/a/x", "/a/z", "not_found"},
		{"missing parent of the destination", "/a/other", "/nodir/z", "not_found"},
		{"onto a non-empty directory", "/empty", "/full", "failed_precondition"},
		{"directory onto an empty one", "/full", "/empty", ""},
		{"dot-dot", "/a/../etc", "/b", "invalid_argument"},
		{"root", "/", "/b", "invalid_argument"},
		{"through a symlink out of the root", "/out/secret", "/stolen", "not_found"},
		{"into a symlink out of the root", "/a/other", "/out/planted", "not_found"},
		{"the symlink itself", "/out", "/out2", ""},
	}
	for _, st := range steps {
		err := c.Rename(ctx, st.from, st.to)
		if st.code == "" {
			if err != nil {
				t.Errorf("%s: Rename(%s, %s): %v", st.name, st.from, st.to, err)
			}
			continue
		}
		wantCode(t, st.name, err, st.code)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a", "other")); err != nil || string(b) != "x" {
		t.Errorf("/a/other: got %q, %v; want the renamed file's %q", b, err, "x")
	}
	if b, err := os.ReadFile(filepath.Join(root, "empty", "f")); err != nil || string(b) != "f" {
		t.Errorf("/empty/f: got %q, %v; want the moved directory's file", b, err)
	}
	for _, p := range []string{"nodir", "stolen", "out"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/%s exists after the renames (%v), want it absent", p, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "out2")); err != nil || target != outside {
		t.Errorf("/out2: got link to %q, %v; want the moved link to %q", target, err, outside)
	}
	ents, err := os.ReadDir(outside)
	if err != nil || len(ents) != 1 || ents[0].Name() != "secret" {
		t.Errorf("the directory outside the root changed: %v, %v", ents, err)
	}
}

func TestStatOwnerAndTarget(t *testing.T) {
	require(t, os.Geteuid() == 0, "chown needs root")
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	writeFile(t, filepath.Join(root, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\nalice:x:1234:1234::/home/alice:/bin/sh\n")
	writeFile(t, filepath.Join(root, "etc", "group"), "root:x:0:\nstaff:x:5678:alice\n")
	writeFile(t, filepath.Join(root, "d", "owned"), "x")
	writeFile(t, filepath.Join(root, "d", "strange"), "x")
	if err := os.Chown(filepath.Join(root, "d", "owned"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "d", "strange"), 4321, 8765); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("owned", filepath.Join(root, "d", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../nowhere", filepath.Join(root, "d", "dangling")); err != nil {
		t.Fatal(err)
	}
	type owner struct {
		uid, gid     uint32
		owner, group string
		symlink      bool
		target       string
	}
	of := func(fi agentproto.FileInfo) owner {
		return owner{fi.UID, fi.GID, fi.Owner, fi.Group, fi.IsSymlink, fi.Target}
	}
	stats := map[string]owner{
		"/d/owned":    {1234, 5678, "alice", "staff", false, ""},
		"/d/strange":  {4321, 8765, "4321", "8765", false, ""},
		"/d/link":     {1234, 5678, "alice", "staff", false, "owned"}, // followed, and its target named
		"/d/dangling": {0, 0, "root", "root", true, "../nowhere"},
	}
	for p, want := range stats {
		fi, err := c.Stat(ctx, p)
		if err != nil {
			t.Errorf("Stat(%s): %v", p, err)
			continue
		}
		if got := of(*fi); got != want {
			t.Errorf("Stat(%s): got %+v, want %+v", p, got, want)
		}
	}
	list, err := c.List(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	wantList := map[string]owner{
		"owned":    stats["/d/owned"],
		"strange":  stats["/d/strange"],
		"link":     {0, 0, "root", "root", true, "owned"}, // not followed
		"dangling": stats["/d/dangling"],
	}
	if len(list) != len(wantList) {
		t.Errorf("List: got %d entries, want %d", len(list), len(wantList))
	}
	for _, fi := range list {
		if got, want := of(fi), wantList[fi.Name]; got != want {
			t.Errorf("List entry %s: got %+v, want %+v", fi.Name, got, want)
		}
	}
}

// FuzzParseAccounts: whatever the sandbox writes to /etc/passwd or /etc/group, the
// parser yields only names of 1 to maxAccountName bytes without separators.
func FuzzParseAccounts(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1234:1235::/home/alice:/bin/sh\n"), true)
	f.Add([]byte("root:x:0:\nstaff:x:50:alice,bob\n+nis::::\n"), false)
	f.Add([]byte("a:x:99999999999:0::/:\n::0:0::/:\nb:x:-1:0::/:"), true)
	f.Fuzz(func(t *testing.T, b []byte, passwd bool) {
		parseAccounts(bytes.NewReader(b), passwd, func(a account) bool {
			if a.name == "" || len(a.name) > maxAccountName || strings.ContainsAny(a.name, ":\n") {
				t.Errorf("parsed the name %q", a.name)
			}
			if strings.ContainsAny(a.home, ":\n") {
				t.Errorf("parsed the home %q", a.home)
			}
			return true
		})
	})
}

// TestListLargeDirectory: a directory whose listing is larger than one frame comes in
// several, whole and in order; one past the client's bound is refused.
func TestListLargeDirectory(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	dir := filepath.Join(root, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Long names make the listing several MiB: several frames of listChunk.
	const n = 12000
	pad := strings.Repeat("x", 200)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d-%s", i, pad)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.List(ctx, "/many")
	if err != nil {
		t.Fatalf("List of %d entries: %v", n, err)
	}
	if len(list) != n {
		t.Fatalf("List: %d entries, want %d", len(list), n)
	}
	for i, fi := range list {
		if want := fmt.Sprintf("%05d-%s", i, pad); fi.Name != want {
			t.Fatalf("entry %d is %q, want %q", i, fi.Name, want)
		}
	}
}

// TestMkdirAsOwner: the directories a mkdir (and an upload's missing parents) makes
// belong to the ids asked for; those that were there keep theirs.
func TestMkdirAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files away needs root")
	}
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	if err := os.Mkdir(filepath.Join(root, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.MkdirAs(ctx, "/old/a/b", true, 1000, 1001); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, "/old/up/f", 0o644, 1002, 1002, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]uint32{"old": {0, 0}, "old/a": {1000, 1001}, "old/a/b": {1000, 1001}, "old/up": {1002, 1002}, "old/up/f": {1002, 1002}} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, p), &st); err != nil || st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s: owner %d:%d (%v), want %d:%d", p, st.Uid, st.Gid, err, want[0], want[1])
		}
	}
}

// failingReader gives some bytes, then fails: an upload whose body broke.
type failingReader struct{ sent bool }

func (r *failingReader) Read(b []byte) (int, error) {
	if r.sent {
		return 0, errors.New("the body broke")
	}
	r.sent = true
	return copy(b, "partial"), nil
}

// An upload in place writes the file under its own name, with its mode and owner,
// leaving no other name in the directory; a failed one leaves a new file unmade and,
// where the bytes are staged unnamed, a replaced file as it was. Where the filesystem
// has no unnamed files the file is written as the bytes come.
func TestUploadInPlace(t *testing.T) {
	for _, staged := range []bool{true, false} {
		t.Run(fmt.Sprintf("staged=%t", staged), func(t *testing.T) {
			if !staged {
				defer func(f func(int) (int, error)) { openUnnamed = f }(openUnnamed)
				openUnnamed = func(int) (int, error) { return -1, unix.EOPNOTSUPP }
			}
			c, root := startAgent(t, Options{})
			ctx := ctxT(t)
			if _, err := c.UploadInPlace(ctx, "/d/f", 0o640, 1234, 5678, strings.NewReader("first")); err != nil {
				t.Fatal(err)
			}
			if _, err := c.UploadInPlace(ctx, "/d/f", 0o600, 1234, 5678, strings.NewReader("second")); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(root, "d/f"))
			b, _ := os.ReadFile(filepath.Join(root, "d/f"))
			if err != nil || string(b) != "second" || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the file: %q, %v, %v; want second, mode 0600", b, fi, err)
			}
			if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != 1234 || st.Gid != 5678) {
				t.Errorf("the file is %d:%d; want 1234:5678", st.Uid, st.Gid)
			}
			if _, err := c.UploadInPlace(ctx, "/d/new", 0, -1, -1, &failingReader{}); err == nil {
				t.Error("a broken upload succeeded")
			}
			if staged {
				if _, err := c.UploadInPlace(ctx, "/d/f", 0, -1, -1, &failingReader{}); err == nil {
					t.Error("a broken upload succeeded")
				}
				if b, _ := os.ReadFile(filepath.Join(root, "d/f")); string(b) != "second" {
					t.Errorf("after a broken upload over it the file holds %q; want it as it was", b)
				}
			}
			ents, _ := os.ReadDir(filepath.Join(root, "d"))
			if len(ents) != 1 || ents[0].Name() != "f" {
				t.Errorf("the directory holds %v; want f alone", ents)
			}
			if err := unix.Mkfifo(filepath.Join(root, "d/fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = c.UploadInPlace(ctx, "/d/fifo", 0, -1, -1, strings.NewReader("x"))
			wantCode(t, "upload over a FIFO", err, "invalid_argument")
		})
	}
}
