package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/manager"
	"golang.org/x/sys/unix"
)

const nobody = 65534 // another host user

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (to give files to another user)")
	}
}

// rootTemp is a fresh directory of root's, 0755, under /tmp (sticky), removed after.
func rootTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "altrust-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mkdir makes p with mode, in the kernel's bits (0o1777 is sticky).
func mkdir(t *testing.T, p string, mode uint32, uid, gid int) string {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkfile(t *testing.T, p string, mode os.FileMode, uid, gid int) string {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrustedPath: a path is trusted only if no user but root can change what it names.
func TestTrustedPath(t *testing.T) {
	requireRoot(t)
	d := rootTemp(t)
	good := mkfile(t, filepath.Join(d, "good"), 0o600, 0, 0)
	groupRoot := mkfile(t, filepath.Join(d, "group-root-writable"), 0o660, 0, 0)
	open := mkfile(t, filepath.Join(d, "world-writable"), 0o666, 0, 0)
	groupOther := mkfile(t, filepath.Join(d, "group-writable"), 0o660, 0, nobody)
	theirs := mkfile(t, filepath.Join(d, "theirs"), 0o644, nobody, nobody)
	openDir := mkdir(t, filepath.Join(d, "open"), 0o777, 0, 0)
	inOpen := mkfile(t, filepath.Join(openDir, "f"), 0o600, 0, 0)
	sticky := mkdir(t, filepath.Join(d, "sticky"), 0o1777, 0, 0)
	inSticky := mkfile(t, filepath.Join(sticky, "f"), 0o600, 0, 0)
	theirDir := mkdir(t, filepath.Join(sticky, "theirs"), 0o755, nobody, nobody)
	inTheirDir := mkfile(t, filepath.Join(theirDir, "f"), 0o600, 0, 0)
	// A link of another user's, in a sticky directory, to a good file.
	theirLink := filepath.Join(sticky, "their-link")
	if err := os.Symlink(good, theirLink); err != nil {
		t.Fatal(err)
	}
	os.Lchown(theirLink, nobody, nobody)
	rootLink := filepath.Join(d, "root-link")
	os.Symlink("open/f", rootLink) // root's, relative, to a file in an open directory
	rootLinkGood := filepath.Join(d, "root-link-good")
	os.Symlink("../"+filepath.Base(d)+"/good", rootLinkGood)

	for _, tc := range []struct {
		path   string
		exists bool
		refuse string
	}{
		{good, true, ""},
		{groupRoot, true, ""},
		{filepath.Join(d, "missing", "x"), false, ""},
		{inSticky, true, ""}, // /tmp is sticky too
		{rootLinkGood, true, ""},
		{open, false, "may write"},
		{groupOther, false, "may write"},
		{theirs, false, "owned by uid 65534"},
		{inOpen, false, "may write"},
		{sticky, false, "may write"}, // sticky is no help to the last component
		{inTheirDir, false, "owned by uid 65534"},
		{filepath.Join(theirDir, "missing"), false, "owned by uid 65534"},
		{theirLink, false, "symbolic link owned by uid 65534"},
		{rootLink, false, "may write"},
		{"relative/path", false, "not an absolute path"},
	} {
		exists, err := TrustedPath(tc.path)
		if tc.refuse == "" && (err != nil || exists != tc.exists) {
			t.Errorf("TrustedPath(%s) = %v, %v; want %v, nil", tc.path, exists, err, tc.exists)
		}
		if tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)) {
			t.Errorf("TrustedPath(%s) = %v, %v; want an error saying %q", tc.path, exists, err, tc.refuse)
		}
	}
}

// TestTrustedDirFollowsNoOthersLink: a directory the daemon makes (the secrets tmpfs's,
// the state directory) is never made, or mounted on, through another user's link.
func TestTrustedDirFollowsNoOthersLink(t *testing.T) {
	requireRoot(t)
	d := rootTemp(t)
	sticky := mkdir(t, filepath.Join(d, "sticky"), 0o1777, 0, 0)
	target := mkdir(t, filepath.Join(d, "target"), 0o755, 0, 0)
	link := filepath.Join(sticky, "secrets")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, nobody, nobody)
	if err := trustedDir(filepath.Join(link, "x"), 0o700, "secrets_dir"); err == nil {
		t.Fatal("trustedDir through another user's link succeeded")
	}
	if _, err := os.Stat(filepath.Join(target, "x")); err == nil {
		t.Error("a directory was made where another user's link pointed")
	}
	if err := trustedDir(link, 0o700, "secrets_dir"); err == nil {
		t.Fatal("trustedDir of another user's link succeeded")
	}
	// Made by another user before the daemon: refused.
	theirs := mkdir(t, filepath.Join(sticky, "pre-made"), 0o700, nobody, nobody)
	if err := trustedDir(theirs, 0o700, "state_dir"); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("trustedDir of another user's directory: %v", err)
	}
	// Made fresh in a sticky directory: fine.
	fresh := filepath.Join(sticky, "fresh", "secrets")
	if err := trustedDir(fresh, 0o700, "secrets_dir"); err != nil {
		t.Errorf("trustedDir(%s): %v", fresh, err)
	}
}

// TestLockFile: one holder at a time; the lock file is never opened through a link.
func TestLockFile(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, "airlock.lock")
	f, err := lockFile(p, "state directory "+d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockFile(p, "state directory "+d); err == nil || !strings.Contains(err.Error(), "another daemon (pid ") {
		t.Errorf("a second lock: %v; want it refused naming the holder", err)
	}
	f.Close()
	f, err = lockFile(p, "state directory "+d)
	if err != nil {
		t.Fatalf("lock after the holder ended: %v", err)
	}
	f.Close()
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("lock file: %v, %v; want 0600", fi, err)
	}
	victim := filepath.Join(d, "victim")
	link := filepath.Join(d, "link.lock")
	os.Symlink(victim, link)
	if f, err := lockFile(link, "socket"); err == nil {
		f.Close()
		t.Error("a lock through a link succeeded")
	}
	if _, err := os.Stat(victim); err == nil {
		t.Error("the link's target was made")
	}
}

// TestClaimSocket: the socket's directory must be root's alone; a second daemon on one
// socket is refused before it does anything, whether the first locked it or not.
func TestClaimSocket(t *testing.T) {
	requireRoot(t)
	d := rootTemp(t)
	for _, dir := range []string{
		mkdir(t, filepath.Join(d, "open"), 0o777, 0, 0),
		mkdir(t, filepath.Join(d, "sticky"), 0o1777, 0, 0), // as /tmp: others could squat the name
		mkdir(t, filepath.Join(d, "theirs"), 0o700, nobody, nobody),
	} {
		if l, err := claimSocket(filepath.Join(dir, "api.sock")); err == nil {
			l.Close()
			t.Errorf("a socket in %s was claimed", dir)
		}
	}
	sock := filepath.Join(d, "run", "airlock", "api.sock")
	lock, err := claimSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("the socket's directory: %v, %v", fi, err)
	}
	if l, err := claimSocket(sock); err == nil || !strings.Contains(err.Error(), "another daemon") {
		if l != nil {
			l.Close()
		}
		t.Errorf("a second claim: %v", err)
	}
	l, err := listenUnix(sock, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lock.Close()
	// A daemon that serves on it without the lock (an older one): refused too.
	if l2, err := claimSocket(sock); err == nil || !strings.Contains(err.Error(), "already serving") {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("a claim of a served socket: %v", err)
	}
	if c, err := net.Dial("unix", sock); err != nil {
		t.Errorf("the first socket no longer answers: %v", err)
	} else {
		c.Close()
	}
}

// TestDefaultLimitBoundsAreTheManagers: the configuration's bounds of default limits
// are the manager's maxima.
func TestDefaultLimitBoundsAreTheManagers(t *testing.T) {
	b, mx := config.DefaultLimitBounds, manager.DefaultConfig().MaxLimits
	if b.MaxCPU != mx.CPU || b.MaxMemory != mx.Memory || b.MaxPIDs != mx.PIDs || b.MaxOpenFiles != mx.OpenFiles || b.MaxDisk != mx.Disk {
		t.Errorf("config.DefaultLimitBounds %+v; the manager's maxima are %+v", b, mx)
	}
}
