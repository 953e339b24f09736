package client

import (
	"archive/tar"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarServer answers GET files/tar with what write puts in a tar stream, as a sandbox
// that chose every byte would, and keeps the body of a PUT.
func tarServer(t *testing.T, write func(tw *tar.Writer)) (*Client, *[]string) {
	var got []string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/box/files/tar" {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodPut {
			tr := tar.NewReader(r.Body)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				got = append(got, h.Name+"|"+h.Linkname)
			}
			writeJSON(w, 201, map[string]any{"path": r.URL.Query().Get("path"), "files": 1})
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		tw := tar.NewWriter(w)
		write(tw)
		tw.Close()
	}))
	return c, &got
}

// TestDownloadDirRefusesHostileArchive: a daemon (a sandbox) that sends a link and
// then a file through it gets ErrArchiveRefused; nothing is written where the link
// points, and the directory DownloadDir made is gone again.
func TestDownloadDirRefusesHostileArchive(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o755)
	for _, tc := range []struct {
		name   string
		write  func(tw *tar.Writer)
		reason string
	}{
		{"link then file", func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside})
			tw.WriteHeader(&tar.Header{Name: "l/pwned", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
			tw.Write([]byte("x"))
		}, "never followed"},
		{"dotdot", func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "../outside/pwned", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
			tw.Write([]byte("x"))
		}, `".." element`},
		{"device", func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3})
		}, "device node"},
		{"a million entries", func(tw *tar.Writer) {
			for range 1_000_000 {
				if tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}) != nil {
					return // the client hung up
				}
			}
		}, "more than 100 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := tarServer(t, tc.write)
			dst := filepath.Join(base, "dst")
			_, err := c.DownloadDir(context.Background(), "box", "/src", dst, &TreeOptions{MaxEntries: 100})
			if !errors.Is(err, ErrArchiveRefused) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("DownloadDir: err = %v; want ErrArchiveRefused naming %q", err, tc.reason)
			}
			if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the directory DownloadDir made is still there (%v)", err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("written outside the directory: %v", ents)
			}
		})
	}
}

// TestUploadDirSendsLinksAsLinks: UploadDir sends a link out of the tree as a link
// and never reads what it points to.
func TestUploadDirSendsLinksAsLinks(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(src, "etc"))
	c, got := tarServer(t, nil)
	sum, err := c.UploadDir(context.Background(), "box", src, "/dst", nil)
	if err != nil || sum.Path != "/dst" {
		t.Fatalf("UploadDir: %+v, %v", sum, err)
	}
	if strings.Join(*got, ",") != "etc|/etc,f|" {
		t.Errorf("entries sent: %v; want the link as a link and the file", *got)
	}
	if _, err := c.UploadDir(context.Background(), "box", filepath.Join(src, "missing"), "/dst", nil); err == nil {
		t.Error("UploadDir of a missing directory: no error")
	}
}
