package image

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestHostImage(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	img, err := s.Get(admin, HostName)
	if err != nil {
		t.Fatalf("Get(host): %v", err)
	}
	if !img.Builtin || img.Name != HostName || len(img.Layers) != 1 || img.Config.WorkingDir != "/root" {
		t.Errorf("host image = %+v", img)
	}
	if len(img.Mounts) == 0 || img.Mounts[0] != (Mount{Source: "/usr", Destination: "/usr", ReadOnly: true}) {
		t.Errorf("host mounts = %+v, want /usr read-only first", img.Mounts)
	}
	dirs := s.LayerDirs(img)
	if len(dirs) != 1 || dirs[0] != s.path("host", hexOf(img.Digest)) {
		t.Fatalf("LayerDirs(host) = %v", dirs)
	}
	root := dirs[0]
	if got := readIn(t, root, "etc/passwd"); !strings.Contains(got, "root:x:0:0:root:/root:/bin/bash\n") || !strings.Contains(got, "user:x:1000:1000:") {
		t.Errorf("etc/passwd = %q", got)
	}
	host, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if got := readIn(t, root, "etc/ssl/certs/ca-certificates.crt"); len(host) > 0 && got != string(host) {
		t.Errorf("CA bundle differs from the host's (%d vs %d bytes)", len(got), len(host))
	}
	if target, _ := os.Readlink(filepath.Join(root, "etc/ssl/cert.pem")); target != "certs/ca-certificates.crt" {
		t.Errorf("etc/ssl/cert.pem -> %q", target)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/shadow")); err == nil {
		t.Error("etc/shadow exists")
	}
	if got := entries(t, filepath.Join(root, "root")); len(got) != 0 {
		t.Errorf("root/ holds %v, want nothing from the host", got)
	}
	for _, c := range []struct {
		name      string
		mode, uid uint32
	}{{"root", 0o700, 0}, {"tmp", 0o1777, 0}, {"var/tmp", 0o1777, 0}, {"home/user", 0o755, 1000}, {"usr", 0o755, 0}} {
		if st := lstat(t, filepath.Join(root, c.name)); st.Mode&0o7777 != c.mode || st.Uid != c.uid {
			t.Errorf("%s: mode %o uid %d, want %o %d", c.name, st.Mode&0o7777, st.Uid, c.mode, c.uid)
		}
	}
	if fi, err := os.Lstat("/bin"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		want, _ := os.Readlink("/bin")
		if got, _ := os.Readlink(filepath.Join(root, "bin")); got != want {
			t.Errorf("bin -> %q, want the host's %q", got, want)
		}
	}
	filepath.WalkDir(filepath.Join(root, "etc/alternatives"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
			t.Errorf("%s is not a symlink", p)
		}
		return nil
	})

	again, err := Open(filepath.Dir(s.path("x")))
	if err != nil {
		t.Fatal(err)
	}
	img2, _ := again.Get(admin, HostName)
	if img2.Digest != img.Digest || !img2.Created.Equal(img.Created) {
		t.Errorf("reopened host image %s %v, want the same %s %v", img2.Digest, img2.Created, img.Digest, img.Created)
	}
}

// fakeHost makes a host root with secrets that must never reach the skeleton.
func fakeHost(t *testing.T) string {
	root := t.TempDir()
	for name, body := range map[string]string{
		"usr/lib/os-release":                "ID=fake\n",
		"usr/bin/mawk":                      "awk",
		"bin/sh":                            "sh",
		"root/.secret":                      "SECRET-root",
		"home/alice/.ssh/id_ed25519":        "SECRET-key",
		"etc/shadow":                        "SECRET-shadow",
		"etc/ssh/ssh_host_ed25519_key":      "SECRET-hostkey",
		"var/lib/airlock/state":             "SECRET-state",
		"etc/ssl/certs/ca-certificates.crt": "CA",
		"etc/ld.so.conf.d/x.conf":           "/opt/lib\n",
		"etc/alternatives/README":           "readme",
	} {
		writeTree(t, root, map[string][]byte{name: []byte(body)})
	}
	for name, target := range map[string]string{
		"lib": "usr/lib", "etc/os-release": "../usr/lib/os-release", "etc/alternatives/awk": "/usr/bin/mawk",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestHostSkeletonFromFakeHost(t *testing.T) {
	requireRoot(t)
	host := fakeHost(t)
	tb, mounts, err := hostSkeleton(host)
	if err != nil {
		t.Fatal(err)
	}
	tb2, _, _ := hostSkeleton(host)
	if !bytes.Equal(tb, tb2) {
		t.Error("hostSkeleton is not deterministic")
	}
	want := []Mount{{Source: host + "/usr", Destination: "/usr", ReadOnly: true}, {Source: host + "/bin", Destination: "/bin", ReadOnly: true}}
	if len(mounts) != len(want) || mounts[0] != want[0] || mounts[1] != want[1] {
		t.Errorf("mounts = %+v, want %+v", mounts, want)
	}
	root, err := unpackTar(t, tb)
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("SECRET")) {
				t.Errorf("%s carries a host secret", p)
			}
		}
		return nil
	})
	for _, p := range []string{"etc/shadow", "etc/ssh", "root/.secret", "home/alice", "var/lib/airlock", "etc/alternatives/README"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s is in the skeleton", p)
		}
	}
	if got := readIn(t, root, "etc/os-release"); got != "ID=fake\n" {
		t.Errorf("etc/os-release = %q", got)
	}
	if got, _ := os.Readlink(filepath.Join(root, "lib")); got != "usr/lib" {
		t.Errorf("lib -> %q", got)
	}
	if got, _ := os.Readlink(filepath.Join(root, "etc/alternatives/awk")); got != "/usr/bin/mawk" {
		t.Errorf("etc/alternatives/awk -> %q", got)
	}
	if st := lstat(t, filepath.Join(root, "bin")); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Error("bin is not a mount point directory")
	}
}

func TestHostImageFollowsHostChanges(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	host := fakeHost(t)
	ensure := func() string {
		unlock, err := s.lock("meta.lock", unix.LOCK_EX)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if err := s.ensureHost(host); err != nil {
			t.Fatal(err)
		}
		img, err := s.Get(admin, HostName)
		if err != nil {
			t.Fatal(err)
		}
		return img.Digest
	}
	d1 := ensure()
	if d := ensure(); d != d1 {
		t.Errorf("unchanged host: digest %s, want %s", d, d1)
	}
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(host, "usr/lib/os-release"), future, future); err != nil {
		t.Fatal(err)
	}
	d2 := ensure()
	if d2 == d1 {
		t.Fatal("host /usr changed but the digest did not")
	}
	if old, err := s.Get(admin, d1); err != nil || old.Name != "" || !old.Builtin {
		t.Errorf("old host image = %+v, %v; want it kept unnamed for the sandboxes on it", old, err)
	}
	if err := s.Remove(admin, d1, nil); err != nil {
		t.Errorf("Remove old host image: %v", err)
	}
	if _, err := os.Stat(s.path("host", hexOf(d1))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old host skeleton still there: %v", err)
	}
	if err := s.Remove(admin, d2, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove current host image: %v", err)
	}
}
