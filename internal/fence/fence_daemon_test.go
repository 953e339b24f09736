package fence

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The uid and gid WayDaemon's tests call the daemon as: nobody's.
const fenceTestUID, fenceTestGID = 65534, 65534

// dialAs connects to a fence socket with uid and gid as its effective ids, so that the
// server sees that caller; the thread it connects from ends afterwards.
func dialAs(uid, gid int) func(string) (*net.UnixConn, error) {
	return func(path string) (*net.UnixConn, error) {
		type result struct {
			conn *net.UnixConn
			err  error
		}
		done := make(chan result, 1)
		onSpareThread(func() {
			for _, c := range []struct {
				nr   uintptr
				args [3]uintptr
			}{
				{unix.SYS_SETGROUPS, [3]uintptr{0, 0, 0}},
				{unix.SYS_SETRESGID, [3]uintptr{^uintptr(0), uintptr(gid), ^uintptr(0)}},
				{unix.SYS_SETRESUID, [3]uintptr{^uintptr(0), uintptr(uid), ^uintptr(0)}},
			} {
				if _, _, e := unix.RawSyscall(c.nr, c.args[0], c.args[1], c.args[2]); e != 0 {
					done <- result{err: e}
					return
				}
			}
			conn, err := dialFence(path)
			done <- result{conn, err}
		})
		r := <-done
		return r.conn, r.err
	}
}

// fenceCallerDirs makes, in a directory anyone may enter, a workspace and a home (with an
// SSH key) owned by the test's caller, and a sibling of the workspace anyone may write:
// only the fence keeps the caller out of it.
func fenceCallerDirs(t *testing.T) fenceDirs {
	d := newFenceDirs(t)
	root := filepath.Dir(d.ws)
	for _, p := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{d.ws, d.home, filepath.Dir(d.key), d.key, filepath.Join(d.ws, "README")} {
		if err := os.Chown(p, fenceTestUID, fenceTestGID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.sibling, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestFenceDaemonRunsAsTheCaller has a daemon put the fence up for a caller that is not
// root: the command runs with the caller's ids, the walls hold where the caller's own
// rights would let it through, and a path the caller cannot reach is refused before
// anything runs.
func TestFenceDaemonRunsAsTheCaller(t *testing.T) {
	requireFenceThread(t)
	sock := startFenceServer(t)
	d := fenceCallerDirs(t)
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + d.home}
	run := func(t *testing.T, f Fence, script string) (string, string, error) {
		t.Helper()
		f.Daemon, f.dial, f.forceDaemon = sock, dialAs(fenceTestUID, fenceTestGID), true
		cmd, err := f.Command(context.Background(), []string{"/bin/sh", "-c", script})
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Way() != WayDaemon {
			t.Fatalf("the fence takes %s, want %s", cmd.Way(), WayDaemon)
		}
		var out, errOut bytes.Buffer
		cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, d.ws, &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	f := Fence{Workspace: d.ws, Access: "rw", Scratch: d.scratch}
	if err := os.Chmod(d.scratch, 0o777); err != nil {
		t.Fatal(err)
	}

	out, stderr, err := run(t, f, `id -u; id -g; id -G; echo fenced > out; echo $TMPDIR`)
	if err != nil {
		t.Fatalf("fenced run: %v (%s)", err, stderr)
	}
	if want := "65534\n65534\n65534\n" + d.scratch + "\n"; out != want {
		t.Errorf("the command printed %q, want %q", out, want)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(d.ws, "out"), &st); err != nil || st.Uid != fenceTestUID {
		t.Errorf("the file the command wrote: uid %d, %v; want the caller's %d", st.Uid, err, fenceTestUID)
	}

	for _, tt := range []struct{ name, script string }{
		{"read the caller's SSH key", "cat " + d.key},
		{"write a sibling anyone may write", "echo x > " + filepath.Join(d.sibling, "out")},
		{"see the fence socket", "test -e " + sock},
		{"write /tmp", "echo x > /tmp/airlock-fence-caller-test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := run(t, f, tt.script)
			var fe *ExitError
			if !errors.As(err, &fe) || strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("%s: %v, printed %q; want a failure and nothing of the key", tt.script, err, out)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(d.sibling, "out")); err == nil {
		t.Errorf("the sibling holds the fenced write")
	}
	os.Remove("/tmp/airlock-fence-caller-test")

	t.Run("exit code", func(t *testing.T) {
		_, _, err := run(t, f, "exit 3")
		var fe *ExitError
		if !errors.As(err, &fe) || fe.Code != 3 {
			t.Errorf("exit 3: %v", err)
		}
	})

	t.Run("a workspace the caller cannot reach", func(t *testing.T) {
		private := filepath.Join(t.TempDir(), "proj") // under a directory only root may enter
		if err := os.Mkdir(private, 0o777); err != nil {
			t.Fatal(err)
		}
		mark := filepath.Join(private, "ran")
		_, _, err := run(t, Fence{Workspace: private, Access: "rw"}, "touch "+mark)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("fence around %s: %v, want it refused as invalid", private, err)
		}
		if _, err := os.Lstat(mark); err == nil {
			t.Errorf("the command ran")
		}
	})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		g := f
		g.Daemon, g.dial, g.forceDaemon = sock, dialAs(fenceTestUID, fenceTestGID), true
		cmd, err := g.Command(ctx, []string{"/bin/sleep", "60"})
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env, cmd.Dir = env, d.ws
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cancel()
		err = cmd.Wait()
		var fe *ExitError
		if !errors.As(err, &fe) || fe.Signal != syscall.SIGKILL {
			t.Errorf("cancelled sleep: %v, want it killed", err)
		}
		if time.Since(start) > 30*time.Second {
			t.Errorf("the cancelled command ran on for %s", time.Since(start))
		}
	})
}

// TestFenceServerRefusesBadRequests sends what a hostile caller might: no files, too
// many bytes, relative paths, no command. Each is refused with a reason and runs nothing.
func TestFenceServerRefusesBadRequests(t *testing.T) {
	requireFenceThread(t)
	sock := startFenceServer(t)
	send := func(t *testing.T, head []byte, body []byte, files int) fenceReply {
		t.Helper()
		conn, err := dialFence(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var oob []byte
		if files > 0 {
			fds := make([]int, files)
			for i := range fds {
				fds[i] = int(os.Stderr.Fd())
			}
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := conn.WriteMsgUnix(head, oob, nil); err != nil {
			t.Fatal(err)
		}
		conn.Write(body)
		var rep fenceReply
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if err := json.NewDecoder(conn).Decode(&rep); err != nil {
			t.Fatalf("no reply: %v", err)
		}
		return rep
	}
	frame := func(req fenceRequest) ([]byte, []byte) {
		b, _ := json.Marshal(&req)
		return binary.BigEndian.AppendUint32(nil, uint32(len(b))), b
	}
	mark := filepath.Join(t.TempDir(), "ran")
	good := fenceRequest{Spec: fenceSpec{Access: "none"}, Argv: []string{"/usr/bin/touch", mark}, Dir: "/"}
	for _, tt := range []struct {
		name  string
		req   func() ([]byte, []byte)
		files int
		want  string
	}{
		{"no files", func() ([]byte, []byte) { return frame(good) }, 0, "three files"},
		{"four files", func() ([]byte, []byte) { return frame(good) }, 4, "three files"},
		{"too long", func() ([]byte, []byte) { return binary.BigEndian.AppendUint32(nil, fenceMaxRequest+1), nil }, 3, "at most"},
		{"not JSON", func() ([]byte, []byte) { return binary.BigEndian.AppendUint32(nil, 3), []byte("{{{") }, 3, "not valid JSON"},
		{"no command", func() ([]byte, []byte) { r := good; r.Argv = nil; return frame(r) }, 3, "empty command"},
		{"relative directory", func() ([]byte, []byte) { r := good; r.Dir = "proj"; return frame(r) }, 3, "not an absolute path"},
		{"relative workspace", func() ([]byte, []byte) { r := good; r.Spec.Workspace, r.Spec.Access = "proj", "rw"; return frame(r) }, 3, "not an absolute path"},
		{"unknown access", func() ([]byte, []byte) { r := good; r.Spec.Access = "all"; return frame(r) }, 3, "unknown workspace access"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head, body := tt.req()
			rep := send(t, head, body, tt.files)
			if rep.Started || !strings.Contains(rep.Error, tt.want) {
				t.Errorf("reply %+v, want an error with %q", rep, tt.want)
			}
			if _, err := os.Lstat(mark); err == nil {
				t.Fatalf("the command ran")
			}
		})
	}
}

// TestFenceCgroupDirs maps a caller's /proc/PID/cgroup to the directories its command
// joins, on a hybrid and a v2 layout, and refuses lines that are not id:controllers:/path.
func TestFenceCgroupDirs(t *testing.T) {
	hybrid, v2 := t.TempDir(), t.TempDir()
	for _, d := range []string{"pids", "cpu,cpuacct", "systemd", "unified"} {
		if err := os.Mkdir(filepath.Join(hybrid, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, root, proc string
		want             []string
	}{
		{"hybrid", hybrid, "12:pids:/user.slice/x\n4:cpu,cpuacct:/a\n1:name=systemd:/b\n0::/c\n", []string{
			filepath.Join(hybrid, "pids/user.slice/x"), filepath.Join(hybrid, "cpu,cpuacct/a"),
			filepath.Join(hybrid, "systemd/b"), filepath.Join(hybrid, "unified/c")}},
		{"a controller mounted alone", hybrid, "3:cpuacct,pids:/d\n", []string{filepath.Join(hybrid, "pids/d")}},
		{"v2", v2, "0::/user.slice/u\n", []string{filepath.Join(v2, "user.slice/u")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fenceCgroupDirs(tt.root, tt.proc)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("fenceCgroupDirs(%q) = %q, %v; want %q", tt.proc, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"garbage", "0::relative", "0::/a/../b", "1:pids:/x/"} {
		if got, err := fenceCgroupDirs(hybrid, bad); err == nil {
			t.Errorf("fenceCgroupDirs(%q) = %q, want an error", bad, got)
		}
	}
}

// TestParseLimits reads this process's /proc/self/limits as the daemon reads a caller's,
// and checks each limit against getrlimit; a short or garbled text is refused.
func TestParseLimits(t *testing.T) {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseLimits(string(b))
	if err != nil {
		t.Fatal(err)
	}
	for r, l := range got {
		var want unix.Rlimit
		if err := unix.Getrlimit(r, &want); err != nil {
			t.Fatal(err)
		}
		if l != want {
			t.Errorf("limit %d: parsed %+v, getrlimit says %+v", r, l, want)
		}
	}
	lines := strings.Split(string(b), "\n")
	for _, bad := range []string{"", strings.Join(lines[:5], "\n"),
		strings.Replace(string(b), "unlimited", "plenty", 1)} {
		if _, err := parseLimits(bad); err == nil {
			t.Errorf("parseLimits(%.60q…) took it", bad)
		}
	}
}

// TestFenceOpenNoMagic: what the daemon opens or enters for a caller never goes through
// a /proc magic link, which would reach the daemon's own open directories.
func TestFenceOpenNoMagic(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	magic := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if fd, err := fenceOpenNoMagic(magic, unix.O_PATH); err == nil {
		unix.Close(fd)
		t.Errorf("opened %s, this process's open directory, through the magic link", magic)
	}
	fd, err := fenceOpenNoMagic(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	unix.Close(fd)
}
