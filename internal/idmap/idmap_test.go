package idmap

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// user maps the project's owner 1000 to a sandbox root 200000; 2000 is someone else.
var user = Mapping{FromUID: 1000, FromGID: 1000, ToUID: 200000, ToGID: 200000}

const overflowID = 65534 // /proc/sys/kernel/overflow{u,g}id

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		const msg = "idmap tests need root (mounts, chown, user namespaces)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// fixture is a project directory src owned by 1000 with "mine" (1000, 0644) and
// "theirs" (2000, 0644), an empty target, and base, the directory holding both.
type fixture struct {
	base, src, target string
	dir               *os.File // src, opened O_PATH
}

// newFixture makes a fixture on t.TempDir, or on a tmpfs there when that file system
// cannot be id-mapped. Its cleanup, which runs after every other cleanup registered
// later, fails the test if a mount under base or a child process is left.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	requireRoot(t)
	base := t.TempDir()
	t.Cleanup(func() {
		if m := mountsUnder(base); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
		}
		if c := children(); len(c) > 0 {
			t.Errorf("child processes left: %v", c)
		}
	})
	// uid 200000 must reach base to use the mount.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{base: base, src: filepath.Join(base, "src"), target: newDir(t, base, "target")}
	newDir(t, base, "src")
	if !idmappable(t, f.src, newDir(t, base, "probe")) {
		t.Logf("%s cannot be id-mapped; using a tmpfs", base)
		if err := unix.Mount("tmpfs", f.src, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(f.src, unix.MNT_DETACH) })
	}
	for _, c := range []struct {
		name string
		uid  int
	}{{"mine", 1000}, {"theirs", 2000}} {
		p := filepath.Join(f.src, c.name)
		if err := os.WriteFile(p, []byte(c.name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, c.uid, c.uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(f.src, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	f.dir = openPath(t, f.src)
	return f
}

// idmappable reports whether src's file system takes an id-mapped mount, trying one at probe.
func idmappable(t testing.TB, src, probe string) bool {
	t.Helper()
	dir := openPath(t, src)
	t.Cleanup(func() { Unmount(probe) })
	err := Mount(dir, probe, user, true)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return false
	}
	if err != nil {
		t.Fatalf("Mount probe: %v", err)
	}
	if err := Unmount(probe); err != nil {
		t.Fatal(err)
	}
	return true
}

// mount mounts f.src at target through m and unmounts it when the test ends.
func (f *fixture) mount(t testing.TB, target string, m Mapping, ro bool) {
	t.Helper()
	t.Cleanup(func() {
		if err := Unmount(target); err != nil {
			t.Error(err)
		}
	})
	if err := Mount(f.dir, target, m, ro); err != nil {
		t.Fatalf("Mount: %v", err)
	}
}

func newDir(t testing.TB, parent, name string) string {
	t.Helper()
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func openPath(t testing.TB, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func owner(t testing.TB, p string) (uid, gid uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// writeAs runs `printf ... >> p` as uid and gid 200000 and returns its error and output.
func writeAs(p, text string) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", `printf %s "$2" >> "$1"`, "sh", p, text)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: user.ToUID, Gid: user.ToGID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMountMapsOwners(t *testing.T) {
	f := newFixture(t)
	f.mount(t, f.target, user, false)

	for _, c := range []struct {
		name     string
		uid, gid uint32
	}{
		{".", 200000, 200000},
		{"mine", 200000, 200000},
		{"theirs", overflowID, overflowID},
	} {
		if uid, gid := owner(t, filepath.Join(f.target, c.name)); uid != c.uid || gid != c.gid {
			t.Errorf("%s through the mount: owner %d/%d, want %d/%d", c.name, uid, gid, c.uid, c.gid)
		}
	}

	for _, c := range []struct {
		name   string
		wantOK bool
		want   string // the file's content on disk afterwards
	}{
		{"new", true, "hi"},
		{"mine", true, "mine\nhi"},
		{"theirs", false, "theirs\n"},
	} {
		out, err := writeAs(filepath.Join(f.target, c.name), "hi")
		if (err == nil) != c.wantOK {
			t.Errorf("write %s as 200000: err %v (%s), want ok=%v", c.name, err, out, c.wantOK)
		}
		if got, _ := os.ReadFile(filepath.Join(f.src, c.name)); string(got) != c.want {
			t.Errorf("%s on disk: %q, want %q", c.name, got, c.want)
		}
	}
	if uid, gid := owner(t, filepath.Join(f.src, "new")); uid != 1000 || gid != 1000 {
		t.Errorf("file created as 200000: owner on disk %d/%d, want 1000/1000", uid, gid)
	}
}

func TestMountReadOnly(t *testing.T) {
	f := newFixture(t)
	f.mount(t, f.target, user, true)

	if uid, _ := owner(t, filepath.Join(f.target, "mine")); uid != 200000 {
		t.Errorf("mine through the read-only mount: uid %d, want 200000", uid)
	}
	for _, name := range []string{"new", "mine"} {
		out, err := writeAs(filepath.Join(f.target, name), "hi")
		if err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("write %s as 200000: err %v (%q), want a read-only file system error", name, err, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.src, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("new on disk after a read-only write: %v, want not exist", err)
	}
	if got, _ := os.ReadFile(filepath.Join(f.src, "mine")); string(got) != "mine\n" {
		t.Errorf("mine on disk: %q, want unchanged", got)
	}
}

// TestBindKeepsMapping: runc bind-mounts the target into the container's root; the
// bind must carry the mapping.
func TestBindKeepsMapping(t *testing.T) {
	f := newFixture(t)
	f.mount(t, f.target, user, false)
	other := newDir(t, f.base, "other")
	t.Cleanup(func() { Unmount(other) })
	if err := unix.Mount(f.target, other, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}

	if uid, gid := owner(t, filepath.Join(other, "mine")); uid != 200000 || gid != 200000 {
		t.Errorf("mine through the bind: owner %d/%d, want 200000/200000", uid, gid)
	}
	if out, err := writeAs(filepath.Join(other, "new"), "hi"); err != nil {
		t.Fatalf("write through the bind as 200000: %v (%s)", err, out)
	}
	if uid, gid := owner(t, filepath.Join(f.src, "new")); uid != 1000 || gid != 1000 {
		t.Errorf("file created through the bind: owner on disk %d/%d, want 1000/1000", uid, gid)
	}
}

func TestNotRecursive(t *testing.T) {
	f := newFixture(t)
	sub := newDir(t, f.src, "sub")
	t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH) })
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "below"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.mount(t, f.target, user, false)

	if _, err := os.Lstat(filepath.Join(f.target, "sub", "below")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file of a mount below dir, through the mount: %v, want not exist", err)
	}
}

func TestUnmount(t *testing.T) {
	f := newFixture(t)
	if err := Unmount(f.target); err != nil {
		t.Errorf("Unmount with nothing mounted: %v, want nil", err)
	}
	if err := Unmount(filepath.Join(f.base, "missing")); err != nil {
		t.Errorf("Unmount of a missing target: %v, want nil", err)
	}
	f.mount(t, f.target, user, false)
	if err := Unmount(f.target); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	if entries, err := os.ReadDir(f.target); err != nil || len(entries) != 0 {
		t.Errorf("target after Unmount: %d entries, %v; want the empty directory", len(entries), err)
	}
	if m := mountsUnder(f.target); len(m) > 0 {
		t.Errorf("after Unmount: still mounted %v", m)
	}
}

// TestUnmountStacked: a mount made over one a crash left is not hidden for good: Unmount
// takes every mount at target off.
func TestUnmountStacked(t *testing.T) {
	f := newFixture(t)
	f.mount(t, f.target, user, false)
	f.mount(t, f.target, user, true)
	if err := Unmount(f.target); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	if m := mountsUnder(f.target); len(m) > 0 {
		t.Errorf("after Unmount of two stacked mounts: still mounted %v", m)
	}
	if err := os.Remove(f.target); err != nil {
		t.Errorf("remove the target after Unmount: %v", err)
	}
}

// TestMountNosuidNodev: through the mapping an owner's set-user-ID file is one of the
// sandbox root's uid, and the mount is reachable from the host too: neither set-user-ID
// bits nor device files act through it.
func TestMountNosuidNodev(t *testing.T) {
	f := newFixture(t)
	for _, ro := range []bool{false, true} {
		f.mount(t, f.target, user, ro)
		var st unix.Statfs_t
		if err := unix.Statfs(f.target, &st); err != nil {
			t.Fatal(err)
		}
		if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
			t.Errorf("mount (ro %v) flags %#x: want nosuid and nodev", ro, st.Flags)
		}
		if err := Unmount(f.target); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMountErrors(t *testing.T) {
	f := newFixture(t)
	ramfs := newDir(t, f.base, "ramfs")
	t.Cleanup(func() { unix.Unmount(ramfs, unix.MNT_DETACH) })
	if err := unix.Mount("ramfs", ramfs, "ramfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	before := mountsUnder(f.base)

	for _, c := range []struct {
		name   string
		dir    string
		target string
		want   error // nil: any error
	}{
		{"missing target", f.src, filepath.Join(f.base, "missing"), unix.ENOENT},
		{"dir not a directory", filepath.Join(f.src, "mine"), f.target, errdefs.ErrInvalidArgument},
		{"file system without id-mapping", ramfs, f.target, errdefs.ErrFailedPrecondition},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { Unmount(c.target) })
			err := Mount(openPath(t, c.dir), c.target, user, false)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("Mount: %v, want %v", err, c.want)
			}
			if m := mountsUnder(f.base); !slices.Equal(m, before) {
				t.Errorf("mounts after a failed Mount: %v, want %v", m, before)
			}
		})
	}
}

// TestMountNS: a mount through a namespace the caller holds maps as Mount's own does,
// read-only where asked; a namespace that maps otherwise than the mapping the caller
// states is refused, and nothing is mounted.
func TestMountNS(t *testing.T) {
	f := newFixture(t)
	ns := namespace(t, user)
	t.Cleanup(func() { Unmount(f.target) })
	if err := MountNS(f.dir, f.target, user, ns, false); err != nil {
		t.Fatalf("MountNS: %v", err)
	}
	if uid, gid := owner(t, filepath.Join(f.target, "mine")); uid != 200000 || gid != 200000 {
		t.Errorf("mine through the mount: owner %d/%d, want 200000/200000", uid, gid)
	}
	if out, err := writeAs(filepath.Join(f.target, "new"), "hi"); err != nil {
		t.Fatalf("write as 200000: %v (%s)", err, out)
	}
	if uid, gid := owner(t, filepath.Join(f.src, "new")); uid != 1000 || gid != 1000 {
		t.Errorf("file created as 200000: owner on disk %d/%d, want 1000/1000", uid, gid)
	}
	if err := Unmount(f.target); err != nil {
		t.Fatal(err)
	}
	if err := MountNS(f.dir, f.target, user, ns, true); err != nil {
		t.Fatalf("MountNS read-only: %v", err)
	}
	if out, err := writeAs(filepath.Join(f.target, "mine"), "hi"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("write through the read-only mount: err %v (%q), want a read-only file system error", err, out)
	}
	if err := Unmount(f.target); err != nil {
		t.Fatal(err)
	}

	before := mountsUnder(f.base)
	for _, c := range []struct {
		name string
		ns   Mapping
	}{
		{"another base", Mapping{FromUID: 1000, FromGID: 1000, ToUID: 300000, ToGID: 300000}},
		{"another gid", Mapping{FromUID: 1000, FromGID: 1000, ToUID: 200000, ToGID: 300000}},
		{"another on-disk owner", Mapping{FromUID: 0, FromGID: 0, ToUID: 200000, ToGID: 200000, Size: 65536}},
	} {
		err := MountNS(f.dir, f.target, user, namespace(t, c.ns), false)
		if err == nil || !strings.Contains(err.Error(), "does not map as asked") {
			t.Errorf("%s: MountNS = %v, want a refusal of the namespace", c.name, err)
		}
		if m := mountsUnder(f.base); !slices.Equal(m, before) {
			t.Errorf("%s: mounts after a refused namespace: %v, want %v", c.name, m, before)
		}
	}
}

func namespace(t testing.TB, m Mapping) *os.File {
	t.Helper()
	ns, err := Namespace(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// BenchmarkMount against BenchmarkMountNS: the cost of the process a mount starts for
// its namespace.
func BenchmarkMount(b *testing.B) { benchmarkMount(b, nil) }

func BenchmarkMountNS(b *testing.B) { benchmarkMount(b, namespace(b, user)) }

func benchmarkMount(b *testing.B, ns *os.File) {
	f := newFixture(b)
	b.Cleanup(func() { Unmount(f.target) })
	for b.Loop() {
		if err := MountNS(f.dir, f.target, user, ns, false); err != nil {
			b.Fatal(err)
		}
		if err := Unmount(f.target); err != nil {
			b.Fatal(err)
		}
	}
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// children lists the pids of this process's children, zombies included.
func children() []string {
	self := []byte(") ")
	var out []string
	pids, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range pids {
		data, err := os.ReadFile(p)
		i := bytes.LastIndex(data, self)
		if err != nil || i < 0 {
			continue
		}
		// After the command's ")": state, then the parent's pid.
		if f := strings.Fields(string(data[i+2:])); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}
