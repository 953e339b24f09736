package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv/dirtree"
)

// TestTreeCopy copies directory trees into a real sandbox and back with the CLI:
// odd names, modes, empty directories, links pointing in and out (kept as links,
// never followed); a FIFO made in the sandbox is skipped; a crafted archive is
// refused with its entry named and nothing written outside its directory.
func TestTreeCopy(t *testing.T) {
	d := startDaemonB(t, "files: {max_tree_entries: 40, max_tree_bytes: 1MiB}")
	d.must("create", "tree", "--network", "none")

	src := filepath.Join(d.dir, "src")
	for name, f := range map[string]struct {
		body string
		mode os.FileMode
	}{"a b/with space.txt": {"space", 0o644}, "new\nline": {"nl", 0o600}, "ünï/cödé ☃": {"uni", 0o755},
		"-leading-dash": {"dash", 0o640}, "deep/er/est/f": {"deep", 0o444}} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
	}
	os.MkdirAll(filepath.Join(src, "empty"), 0o700)
	os.Chmod(filepath.Join(src, "empty"), 0o700)
	os.Symlink("a b/with space.txt", filepath.Join(src, "in"))
	os.Symlink("/etc/shadow", filepath.Join(src, "out"))
	os.Symlink("../../..", filepath.Join(src, "up"))

	// Into a directory that does not exist: it becomes the copy.
	out := d.must("cp", "-r", src, "tree:/root/copy")
	if !strings.Contains(out, "copied 5 files, 6 directories, 3 links, 18 bytes to tree:/root/copy") {
		t.Errorf("cp -r in: %q; want the summary line", out)
	}
	got := d.must("exec", "tree", "--", "sh", "-c", "cd /root/copy && stat -c '%a %F %n' -- * '-leading-dash' empty deep/er/est/f && readlink out up")
	for _, want := range []string{"640 regular file -leading-dash", "700 directory empty", "444 regular file deep/er/est/f", "/etc/shadow\n../../..\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("in the sandbox: %q lacks %q", got, want)
		}
	}
	// Into a directory that exists: the tree goes under its own name.
	d.must("cp", "-r", src, "tree:/root/copy")
	if got := d.must("exec", "tree", "--", "cat", "/root/copy/src/a b/with space.txt"); got != "space" {
		t.Errorf("cp -r into an existing directory: %q; want the tree under its name", got)
	}

	// Out again: the same tree, links as they were.
	back := filepath.Join(d.dir, "back")
	d.must("exec", "tree", "--", "sh", "-c", "rm -r /root/copy/src && mkfifo /root/copy/fifo")
	out = d.must("cp", "-r", "tree:/root/copy", back)
	if !strings.Contains(out, "copied 5 files, 6 directories, 3 links, 18 bytes to "+back) {
		t.Errorf("cp -r out: %q; want the summary line (the FIFO skipped)", out)
	}
	dirtree.Diff(t, dirtree.Describe(t, src), dirtree.Describe(t, back))
	var sum api.TreeSummary
	if err := json.Unmarshal([]byte(d.must("cp", "-r", "-o", "json", "tree:/root/copy", filepath.Join(d.dir, "json"))), &sum); err != nil || sum.Files != 5 {
		t.Errorf("cp -r -o json: %+v, %v; want a TreeSummary of 5 files", sum, err)
	}

	// A crafted archive: a link to / and then a file through it.
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "ok", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
	tw.Write([]byte("ok"))
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"})
	tw.WriteHeader(&tar.Header{Name: "l/etc/pwned", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	_, errOut, code := d.airlockIn(evil.String(), "cp", "--extract", "-", "tree:/root/evil")
	if code != 1 || !strings.Contains(errOut, `"l/etc/pwned" refused`) || !strings.Contains(errOut, "never followed") {
		t.Errorf("cp --extract of a file through a link: exit %d, %q; want 1 naming the entry and the link", code, errOut)
	}
	if got := d.must("exec", "tree", "--", "sh", "-c", "cat /root/evil/ok; test -e /etc/pwned && echo PWNED; true"); got != "ok" {
		t.Errorf("after the refused archive: %q; want the entry before it and nothing at /etc/pwned", got)
	}
	// The node's bounds, named when passed: entries, and the stream's bytes.
	many, big := filepath.Join(d.dir, "many"), filepath.Join(d.dir, "big")
	os.MkdirAll(many, 0o755)
	for i := range 41 {
		os.WriteFile(filepath.Join(many, fmt.Sprint(i)), nil, 0o644)
	}
	if _, errOut, code := d.airlock("cp", "-r", many, "tree:/root/many"); code != 1 || !strings.Contains(errOut, "more than 40 entries") || !strings.Contains(errOut, "files.max_tree_entries") {
		t.Errorf("cp -r of 41 entries to a node of 40: exit %d, %q; want 1 naming files.max_tree_entries", code, errOut)
	}
	os.MkdirAll(big, 0o755)
	os.WriteFile(filepath.Join(big, "f"), bytes.Repeat([]byte("x"), 2<<20), 0o644)
	if _, errOut, code := d.airlock("cp", "-r", big, "tree:/root/big"); code != 1 || !strings.Contains(errOut, "files.max_tree_bytes") {
		t.Errorf("cp -r of 2 MiB to a node of 1 MiB: exit %d, %q; want 1 naming files.max_tree_bytes", code, errOut)
	}

	var dotdot bytes.Buffer
	tw = tar.NewWriter(&dotdot)
	tw.WriteHeader(&tar.Header{Name: "../../x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	if _, errOut, code := d.airlockIn(dotdot.String(), "cp", "--extract", "-", "tree:/root/dd"); code != 1 || !strings.Contains(errOut, `".." element`) {
		t.Errorf("cp --extract of ../../x: exit %d, %q; want 1 naming the .. element", code, errOut)
	}
}
