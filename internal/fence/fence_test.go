package fence

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The fence tests run real commands under real Landlock and namespaces: the test binary
// is its own fence child (init dispatches ChildCommand, as cmd/airlock's main does)
// and its own probe (fenceProbe: read, write, dial), so each check sees the errno the
// kernel gave.

const fenceProbe = "_fence-probe"

func init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case ChildCommand:
		os.Exit(ChildMain(os.Args[2:], os.Stderr))
	case fenceProbe:
		if err := probe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// probe does one thing the fence may allow or refuse.
func probe(args []string) error {
	if len(args) != 2 {
		return errors.New("want OP ARG")
	}
	switch args[0] {
	case "read":
		b, err := os.ReadFile(args[1])
		os.Stdout.Write(b)
		return err
	case "open":
		f, err := os.Open(args[1])
		if err == nil {
			f.Close()
		}
		return err
	case "write":
		return os.WriteFile(args[1], []byte("fenced"), 0o644)
	case "chmod":
		return os.Chmod(args[1], 0o4777)
	case "tcp", "unix":
		c, err := net.DialTimeout(args[0], args[1], 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	return fmt.Errorf("unknown op %q", args[0])
}

// requireFence skips (in CI: fails) unless this host can put up the fence.
func requireFence(t testing.TB) {
	t.Helper()
	_, err := fenceABI()
	if err == nil {
		if out, uerr := exec.Command("unshare", "-U", "-m", "-n", "true").CombinedOutput(); uerr != nil {
			err = fmt.Errorf("no user namespaces: %v %s", uerr, out)
		}
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// fenceDirs is a test's workspace, scratch directory, a sibling of both, and a home with
// an SSH key in it, all in a private temporary directory. HOME points at the home.
type fenceDirs struct{ ws, scratch, sibling, home, key string }

func newFenceDirs(t *testing.T) fenceDirs {
	root := t.TempDir()
	d := fenceDirs{
		ws:      filepath.Join(root, "ws"),
		scratch: filepath.Join(root, "scratch"),
		sibling: filepath.Join(root, "sibling"),
		home:    filepath.Join(root, "home"),
	}
	d.key = filepath.Join(d.home, ".ssh", "id_rsa")
	for _, dir := range []string{d.ws, d.scratch, d.sibling, filepath.Dir(d.key)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, body := range map[string]string{d.key: "PRIVATE KEY", filepath.Join(d.ws, "README"): "project"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", d.home)
	return d
}

// fenceTestWay is how a test's fence is put up: reexec for WayReexec, daemon (a fence
// socket) for WayDaemon, neither for WayThread.
type fenceTestWay struct {
	reexec bool
	daemon string
}

// fenceWays runs body as a subtest for each way of putting the fence up: WayThread
// and WayDaemon (which need root; the daemon is a Server of the test's own, for
// root), and WayReexec.
func fenceWays(t *testing.T, body func(t *testing.T, w fenceTestWay)) {
	t.Run(string(WayThread), func(t *testing.T) {
		requireFenceThread(t)
		body(t, fenceTestWay{})
	})
	t.Run(string(WayDaemon), func(t *testing.T) {
		requireFenceThread(t)
		body(t, fenceTestWay{daemon: startFenceServer(t)})
	})
	t.Run(string(WayReexec), func(t *testing.T) { body(t, fenceTestWay{reexec: true}) })
}

// startFenceServer serves fences on a socket in a directory of the test's own and
// returns the socket's path; the server stops when the test ends.
func startFenceServer(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := SocketPath(filepath.Join(dir, "api.sock"))
	if !Hides(path) {
		t.Fatalf("a fence does not hide %s", path)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("fence server: %v", err)
		}
		s.Close()
	})
	return path
}

// fenceRun runs the probe (or, with op "", argv as it is) inside f and returns what it
// printed and its exit code.
func fenceRun(t *testing.T, f Fence, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd, out, errOut := fenceStart(t, f, argv...)
	err := cmd.Wait()
	var fe *ExitError
	switch {
	case err == nil:
	case errors.As(err, &fe):
		code = fe.Code
	default:
		t.Fatalf("run %q: %v", argv, err)
	}
	t.Logf("%q (%s): exit %d, stderr %q", argv[min(len(argv)-1, 2):], cmd.Way(), code, errOut.String())
	return out.String(), errOut.String(), code
}

// fenceStart starts what fenceRun runs.
func fenceStart(t *testing.T, f Fence, argv ...string) (cmd *Cmd, stdout, stderr *bytes.Buffer) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if argv[0] == fenceProbe {
		argv = append([]string{self}, argv...)
		f.ExtraRead = append(f.ExtraRead, filepath.Dir(self)) // the probe is this binary
	}
	cmd, err = f.Command(context.Background(), argv)
	if err != nil {
		t.Fatalf("Command(%q): %v", argv, err)
	}
	want := WayThread
	switch {
	case f.forceReexec:
		want = WayReexec
	case f.forceDaemon:
		want = WayDaemon
	}
	if cmd.Way() != want && fenceThreadCapable() {
		t.Fatalf("Command(%q) takes %s, want %s", argv, cmd.Way(), want)
	}
	if f.Workspace != "" && f.Access != "none" {
		cmd.Dir = f.Workspace
	} else {
		cmd.Dir = "/"
	}
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q (%s): %v", argv, cmd.Way(), err)
	}
	return cmd, stdout, stderr
}

func TestFenceFiles(t *testing.T) {
	requireFence(t)

	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		d := newFenceDirs(t)
		f := Fence{Workspace: d.ws, Access: "rw", Scratch: d.scratch, forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
		outside := fmt.Sprintf("/tmp/airlock-fence-test-%d", os.Getpid())
		t.Cleanup(func() { os.Remove(outside) })
		tests := []struct {
			name   string
			op     string
			path   string
			wantOK bool
		}{
			{"read the workspace", "read", filepath.Join(d.ws, "README"), true},
			{"write the workspace", "write", filepath.Join(d.ws, "out"), true},
			{"write the scratch directory", "write", filepath.Join(d.scratch, "out"), true},
			{"write a private /dev/shm", "write", "/dev/shm/out", true},
			{"write /dev/null", "write", "/dev/null", true},
			{"read the system", "read", "/etc/os-release", true},
			{"read an SSH key in the home", "read", d.key, false},
			{"read an SSH key by a relative path", "read", "../home/.ssh/id_rsa", false},
			{"read the real home", "read", "/root/.bashrc", false},
			{"write a sibling of the workspace", "write", filepath.Join(d.sibling, "out"), false},
			{"write the home", "write", filepath.Join(d.home, "out"), false},
			{"write /etc", "write", "/etc/airlock-fence-test", false},
			{"write /usr", "write", "/usr/airlock-fence-test", false},
			{"write /tmp outside the scratch directory", "write", outside, false},
			{"write /var/tmp", "write", "/var/tmp/airlock-fence-test", false},
			{"open a device outside the set", "open", "/dev/kmsg", false},
			{"open the daemon's directory", "open", DaemonDir, false},
			{"open the D-Bus socket directory", "open", "/run/dbus", false},
			{"read /etc/shadow", "read", "/etc/shadow", true}, // readable, but empty: checked below
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				stdout, stderr, code := fenceRun(t, f, fenceProbe, tt.op, tt.path)
				if gotOK := code == 0; gotOK != tt.wantOK {
					t.Errorf("%s %s: exit %d (%s), want success %v", tt.op, tt.path, code, strings.TrimSpace(stderr), tt.wantOK)
				}
				if strings.Contains(stdout, "PRIVATE KEY") || (tt.path == "/etc/shadow" && stdout != "") {
					t.Errorf("%s %s printed %q, want nothing of it", tt.op, tt.path, stdout)
				}
			})
		}
		for _, p := range []string{filepath.Join(d.sibling, "out"), filepath.Join(d.home, "out"), "/etc/airlock-fence-test", outside} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s exists on the host after a fenced write", p)
				os.Remove(p)
			}
		}
		if b, err := os.ReadFile(filepath.Join(d.ws, "out")); err != nil || string(b) != "fenced" {
			t.Errorf("the workspace holds %q, %v; want the fenced write", b, err)
		}
	})
}

// TestFenceLandlockAlone checks the walls where the mount namespace hides nothing
// (Landlock's, and the read-only mounts): beside a workspace outside /tmp and the homes — under /var/lib as root (the
// source tree may itself be in /tmp), else in the source tree.
func TestFenceLandlockAlone(t *testing.T) {
	requireFence(t)

	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		parent := "/var/lib"
		if os.Geteuid() != 0 {
			parent = "testdata"
			if err := os.MkdirAll(parent, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		root, err := os.MkdirTemp(parent, "airlock-fence-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.RemoveAll(root)
			if parent == "testdata" {
				os.Remove("testdata") // only if nothing else is in it
			}
		})
		root, _ = filepath.Abs(root)
		ws, sibling := filepath.Join(root, "ws"), filepath.Join(root, "sibling")
		secret := filepath.Join(sibling, "credentials")
		for _, dir := range []string{ws, sibling} {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(secret, []byte("PRIVATE KEY"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "tool"), nil, 0o755); err != nil {
			t.Fatal(err)
		}
		f := Fence{Workspace: ws, Access: "rw", forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
		for _, op := range []struct{ op, path, want string }{
			{"read", secret, "permission denied"},
			// A read-only mount refuses the writes before Landlock does.
			{"write", filepath.Join(sibling, "out"), "read-only file system"},
			{"write", secret, "read-only file system"},
			// Landlock does not wall chmod: the read-only mount does.
			{"chmod", secret, "read-only file system"},
			{"chmod", filepath.Join(ws, "tool"), ""},
		} {
			stdout, stderr, code := fenceRun(t, f, fenceProbe, op.op, op.path)
			if (code == 0) != (op.want == "") || !strings.Contains(stderr, op.want) || stdout != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want %q", op.op, op.path, code, stdout, stderr, cmp.Or(op.want, "success"))
			}
		}
		if b, _ := os.ReadFile(secret); string(b) != "PRIVATE KEY" {
			t.Errorf("the sibling's file holds %q after fenced writes", b)
		}
		if fi, err := os.Stat(secret); err != nil || fi.Mode() != 0o644 {
			t.Errorf("the sibling's file after a fenced chmod: %v, %v; want -rw-r--r--", fi.Mode(), err)
		}
	})
}

func TestFenceWorkspaceAccess(t *testing.T) {
	requireFence(t)

	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		d := newFenceDirs(t)
		readme := filepath.Join(d.ws, "README")
		tests := []struct {
			access          string
			readOK, writeOK bool
		}{
			{"rw", true, true},
			{"ro", true, false},
			{"none", false, false},
		}
		for _, tt := range tests {
			t.Run(tt.access, func(t *testing.T) {
				f := Fence{Workspace: d.ws, Access: tt.access, Scratch: d.scratch, forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
				_, stderr, code := fenceRun(t, f, fenceProbe, "read", readme)
				if gotOK := code == 0; gotOK != tt.readOK {
					t.Errorf("read: exit %d (%s), want success %v", code, strings.TrimSpace(stderr), tt.readOK)
				}
				out := filepath.Join(d.ws, "out-"+tt.access)
				_, stderr, code = fenceRun(t, f, fenceProbe, "write", out)
				if gotOK := code == 0; gotOK != tt.writeOK {
					t.Errorf("write: exit %d (%s), want success %v", code, strings.TrimSpace(stderr), tt.writeOK)
				}
				if _, err := os.Stat(out); (err == nil) != tt.writeOK {
					t.Errorf("after the write, stat %s: %v; want it to exist: %v", out, err, tt.writeOK)
				}
			})
		}
	})
}

func TestFenceNetwork(t *testing.T) {
	requireFence(t)

	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		d := newFenceDirs(t)
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		sock := filepath.Join(d.sibling, "agent.sock")
		uln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer uln.Close()
		tests := []struct {
			name    string
			network bool
			op      string
			addr    string
			wantOK  bool
		}{
			{"tcp to a host listener without network", false, "tcp", ln.Addr().String(), false},
			{"tcp to a host listener with network", true, "tcp", ln.Addr().String(), true},
			{"a host UNIX socket without network", false, "unix", sock, false},
			{"a host UNIX socket with network", true, "unix", sock, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := Fence{Workspace: d.ws, Access: "rw", Scratch: d.scratch, Network: tt.network, forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
				_, stderr, code := fenceRun(t, f, fenceProbe, tt.op, tt.addr)
				if gotOK := code == 0; gotOK != tt.wantOK {
					t.Errorf("dial %s %s: exit %d (%s), want success %v", tt.op, tt.addr, code, strings.TrimSpace(stderr), tt.wantOK)
				}
			})
		}
	})
}

func TestFenceExitCodes(t *testing.T) {
	requireFence(t)

	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		d := newFenceDirs(t)
		f := Fence{Workspace: d.ws, Access: "rw", Scratch: d.scratch, forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
		tests := []struct {
			argv []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 7"}, 7},
			{[]string{"sh", "-c", `test "$TMPDIR" = "$1"`, "sh", d.scratch}, 0},
			{[]string{"airlock-no-such-command"}, ExitNotFound},
			{[]string{filepath.Join(d.ws, "README")}, ExitNoExec},
		}
		for _, tt := range tests {
			_, stderr, code := fenceRun(t, f, tt.argv...)
			if code != tt.want {
				t.Errorf("%q: exit %d (%s), want %d", tt.argv, code, strings.TrimSpace(stderr), tt.want)
			}
			if code >= ExitNoExec && !strings.HasPrefix(stderr, "airlock fence: ") {
				t.Errorf("%q: stderr %q, want the reason it did not run", tt.argv, stderr)
			}
		}
	})
}

func TestFenceRefuses(t *testing.T) {
	requireFence(t)
	d := newFenceDirs(t)
	file := filepath.Join(d.ws, "README")
	tests := []struct {
		name string
		f    Fence
		argv []string
	}{
		{"an empty command", Fence{Workspace: d.ws}, nil},
		{"an empty argv[0]", Fence{Workspace: d.ws}, []string{""}},
		{"an unknown access", Fence{Workspace: d.ws, Access: "write"}, []string{"true"}},
		{"access without a workspace", Fence{Access: "ro"}, []string{"true"}},
		{"a missing workspace", Fence{Workspace: filepath.Join(d.ws, "missing")}, []string{"true"}},
		{"a file as workspace", Fence{Workspace: file}, []string{"true"}},
		{"/ as workspace", Fence{Workspace: "/"}, []string{"true"}},
		{"the home as workspace", Fence{Workspace: d.home}, []string{"true"}},
		{"a parent of the home as workspace", Fence{Workspace: filepath.Dir(d.home)}, []string{"true"}},
		{"/tmp as scratch", Fence{Scratch: "/tmp"}, []string{"true"}},
		{"/run as extra read path", Fence{ExtraRead: []string{"/run"}}, []string{"true"}},
		{"the daemon's directory as extra write path", Fence{ExtraWrite: []string{DaemonDir}}, []string{"true"}},
		{"the home as extra read path", Fence{ExtraRead: []string{d.home}}, []string{"true"}},
		{"more extra paths than the bound", Fence{ExtraRead: slices.Repeat([]string{d.ws}, fenceMaxExtraPaths+1)}, []string{"true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.f.ExtraWrite != nil {
				if _, err := os.Stat(DaemonDir); err != nil {
					t.Skipf("no %s here", DaemonDir)
				}
			}
			cmd, err := tt.f.Command(context.Background(), tt.argv)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Command(%+v, %q) = %v, %v; want an invalid argument error", tt.f, tt.argv, cmd, err)
			}
		})
	}
}
