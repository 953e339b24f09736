package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestFenceForAnotherUser: `airlock fence` run by a user other than root has the daemon
// put the fence up: the command is the daemon's child, runs with the user's ids, writes
// its workspace and cannot read the user's SSH key.
func TestFenceForAnotherUser(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, cgroup := daemonDir(t, "fence-")
	sock := filepath.Join(dir, "api.sock")
	cfg := writeConfig(t, dir, cgroup)
	daemon := startDaemon(t, bin, cfg)
	var stopped func() // removes what needs the daemon gone
	t.Cleanup(func() {
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
		secret.Unmount(filepath.Join(dir, "secrets"))
		if stopped != nil {
			stopped()
		}
		if _, err := os.Lstat(fence.SocketPath(sock)); err == nil {
			t.Errorf("the fence socket is left after the daemon stopped")
		}
	})
	// The daemon in a cgroup of its own: the fenced command must join its caller's.
	cg := filepath.Join("/sys/fs/cgroup/pids", "airlock-test-"+filepath.Base(dir)+"-daemon")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cg = filepath.Join("/sys/fs/cgroup", filepath.Base(cg))
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	stopped = func() { os.Remove(cg) }
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(fmt.Sprint(daemon.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fence.SocketPath(sock)); err != nil || fi.Mode()&0o777 != 0o666 {
		t.Fatalf("fence socket: %v, %v; want one anyone may connect to", fi, err)
	}
	cl, err := client.New(client.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	status, err := cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reported := false
	for _, c := range status.Checks {
		reported = reported || c.Name == "host fence" && c.OK && strings.Contains(c.Detail, fence.SocketPath(sock))
	}
	if !reported {
		t.Errorf("status checks %+v; want the host fence, naming the fence socket", status.Checks)
	}

	// What the user owns: a copy of the binary it may run, a workspace and a home.
	const uid, gid = 65534, 65534
	user := filepath.Join(dir, "user")
	ws, home := filepath.Join(user, "ws"), filepath.Join(user, "home")
	key := filepath.Join(home, ".ssh", "id_rsa")
	for _, p := range []string{ws, filepath.Dir(key)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("PRIVATE KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	ubin := filepath.Join(user, "airlock")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(ubin, b, 0o755) != nil {
		t.Fatalf("copy the binary: %v", err)
	}
	for _, p := range []string{user, ws, home, filepath.Dir(key), key} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(user, 0o755)

	fenced := func(script string) (string, error) {
		cmd := exec.Command(ubin, "fence", "--socket", sock, "--", "/bin/sh", "-c", script)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := fenced("echo $PPID; id -u; echo fenced > out; cat /proc/self/cgroup")
	if err != nil {
		t.Fatalf("airlock fence as uid %d: %v\n%s", uid, err, out)
	}
	mine, _ := os.ReadFile("/proc/self/cgroup") // the airlock fence process's too
	if want := fmt.Sprintf("%d\n%d\n%s", daemon.Process.Pid, uid, mine); out != want {
		t.Errorf("the fenced command printed %q, want its parent the daemon, its uid the user's and its cgroups the caller's: %q", out, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "out"), &st); err != nil || st.Uid != uid {
		t.Errorf("the workspace's new file: uid %d, %v; want %d", st.Uid, err, uid)
	}
	out, err = fenced("cat " + key)
	if err == nil || strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("reading the user's key inside the fence: %v, %q; want it refused", err, out)
	}

	// The caller's umask and resource limits, and a session of its own (so never the
	// daemon's controlling terminal).
	inner := `umask; ulimit -n; read -r pid _ _ _ _ sid _ < /proc/self/stat; [ "$pid" = "$sid" ] && echo own-session`
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("umask 027; ulimit -n 99; exec %s fence --socket %s -- /bin/sh -c '%s'", ubin, sock, inner))
	cmd.Dir = ws
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if b, err := cmd.CombinedOutput(); err != nil || string(b) != "0027\n99\nown-session\n" {
		t.Errorf("umask, open files limit and session of a fenced command: %v, %q; want the caller's 0027 and 99, and its own session", err, b)
	}

	// A caller in a mount namespace of its own: the command sees the caller's files.
	mnt := filepath.Join(ws, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`mount -t tmpfs tmpfs %s && echo only-in-the-callers-namespace > %s/m && `+
		`exec setpriv --reuid=%d --regid=%d --clear-groups env -i PATH=/usr/bin:/bin HOME=%s %s fence --socket %s -- cat mnt/m`,
		mnt, mnt, uid, gid, home, ubin, sock)
	cmd = exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script)
	cmd.Dir = ws
	b, err := cmd.CombinedOutput()
	if err != nil || string(b) != "only-in-the-callers-namespace\n" {
		t.Errorf("a fenced command of a caller in its own mount namespace: %v, %q; want the file only that namespace has", err, b)
	}
}
