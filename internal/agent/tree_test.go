package agent

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// TestTreeRoundTrip: a tree goes in through file.untar (made with its parents, modes,
// links kept) and comes back the same through file.tar.
func TestTreeRoundTrip(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := ctxT(t)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []*tar.Header{
		{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750},
		{Name: "d/x y", Typeflag: tar.TypeReg, Mode: 0o755, Size: 5},
		{Name: "-l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "empty/", Typeflag: tar.TypeDir, Mode: 0o700},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("hello"))
		}
	}
	tw.Close()
	res, err := c.UploadTree(ctx, "/a/b", agentproto.TarLimits{}, bytes.NewReader(in.Bytes()))
	if err != nil {
		t.Fatalf("UploadTree: %v", err)
	}
	if want := (agentproto.TreeResult{Files: 1, Dirs: 2, Links: 1, Bytes: 5}); *res != want {
		t.Errorf("UploadTree: %+v; want %+v", *res, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "a/b/d/x y")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a/b/d/x y: %v, %v; want mode 0755", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "a/b/-l")); err != nil || target != "/etc/passwd" {
		t.Errorf("a/b/-l: %q, %v; want a link to /etc/passwd", target, err)
	}
	var out bytes.Buffer
	if _, err := c.DownloadTree(ctx, "/a/b", &out); err != nil {
		t.Fatalf("DownloadTree: %v", err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name+"|"+h.Linkname)
	}
	if got, want := strings.Join(names, ","), "-l|/etc/passwd,d/|,d/x y|,empty/|"; got != want {
		t.Errorf("DownloadTree entries: %s; want %s", got, want)
	}
}

// TestUntarRefusesWritingThroughLink: an archive that puts a link to / and then a file
// through it is refused, and nothing is written where the link points.
func TestUntarRefusesWritingThroughLink(t *testing.T) {
	c, root := startAgent(t, Options{})
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"})
	tw.WriteHeader(&tar.Header{Name: "l/pwned", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	_, err := c.UploadTree(ctxT(t), "/dst", agentproto.TarLimits{}, &in)
	if err == nil || !strings.Contains(err.Error(), "never followed") {
		t.Errorf("UploadTree through a link: err = %v; want a refusal naming the link", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "pwned")); err == nil {
		t.Error("the file was written through the link")
	}
}
