package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// python runs a python3 program in the sandbox and returns the result; an API error
// fails the test.
func python(t testing.TB, n *testenv.Node, ref, program string) *api.ExecResult {
	t.Helper()
	res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: []string{"python3", "-c", program}, Timeout: execTimeout})
	if err != nil {
		t.Fatalf("exec python3 in %s: %v", ref, err)
	}
	return res
}

// mustPython runs a python3 program and fails the test unless it succeeds; it returns stdout.
func mustPython(t testing.TB, n *testenv.Node, ref, program string) string {
	t.Helper()
	res := python(t, n, ref, program)
	if res.State != api.ExecSucceeded {
		t.Fatalf("python3 in %s: got state %q exit %d error %q, want succeeded\nstdout: %s\nstderr: %s",
			ref, res.State, res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// keyValues parses "key value..." lines.
func keyValues(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, " ")
		m[k] = v
	}
	return m
}

// TestIsolation checks, from inside real sandboxes of the default host image and from
// the host, every isolation property of DESIGN.md §5.
func TestIsolation(t *testing.T) {
	n := testenv.NewNode(t)
	a := n.Create(t, api.CreateSandboxRequest{Name: "iso-a"})
	b := n.Create(t, api.CreateSandboxRequest{Name: "iso-b"})

	t.Run("user namespace", func(t *testing.T) {
		bases := map[string]uint64{}
		for _, sb := range []*api.Sandbox{a, b} {
			for _, file := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
				out := mustRun(t, n, sb.Name, "cat "+file)
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != 1 {
					t.Fatalf("%s %s: got %d mapping lines %q, want 1", sb.Name, file, len(lines), out)
				}
				f := strings.Fields(lines[0])
				if len(f) != 3 {
					t.Fatalf("%s %s: got %q, want \"inside host size\"", sb.Name, file, lines[0])
				}
				host, _ := strconv.ParseUint(f[1], 10, 32)
				if f[0] != "0" || host == 0 || f[2] != "65536" {
					t.Errorf("%s %s: got %q, want 0 mapped to a non-zero host id, size 65536", sb.Name, file, lines[0])
				}
				if file == "/proc/self/uid_map" {
					bases[sb.ID] = host
				}
			}
		}
		if bases[a.ID] == bases[b.ID] {
			t.Errorf("both sandboxes map root to host uid %d, want a private range each", bases[a.ID])
		}
		if bases[a.ID] > bases[b.ID] && bases[a.ID] < bases[b.ID]+65536 || bases[b.ID] > bases[a.ID] && bases[b.ID] < bases[a.ID]+65536 {
			t.Errorf("uid ranges overlap: %d and %d (size 65536)", bases[a.ID], bases[b.ID])
		}

		// From the host: the sandbox's processes run as its own uid range, never as root,
		// and the agent lives in another user namespace.
		pids := cgroupPIDs(t, n, a.ID)
		if len(pids) == 0 {
			t.Fatalf("no process in the sandbox's cgroup")
		}
		selfNS, _ := os.Readlink("/proc/self/ns/user")
		base := bases[a.ID]
		sawAgent := false
		for _, pid := range pids {
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue // exited meanwhile
			}
			for _, key := range []string{"Uid", "Gid"} {
				for _, id := range strings.Fields(statusField(string(status), key)) {
					v, _ := strconv.ParseUint(id, 10, 32)
					if v == 0 || v < base || v >= base+65536 {
						t.Errorf("host pid %d runs with %s %s, want an id in the sandbox's range [%d, %d)", pid, key, id, base, base+65536)
					}
				}
			}
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmd), "agent") {
				sawAgent = true
				ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
				if ns == "" || ns == selfNS {
					t.Errorf("agent (host pid %d) user namespace %q, want one other than the host's %q", pid, ns, selfNS)
				}
			}
		}
		if !sawAgent {
			t.Errorf("no agent among the sandbox's host pids %v", pids)
		}
	})

	t.Run("seccomp", func(t *testing.T) {
		const program = `
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
def report(name, rc):
    print(name, rc, ctypes.get_errno() if rc == -1 else 0)
ctypes.set_errno(0)
report("unshare", libc.unshare(0x10000000))  # CLONE_NEWUSER
ctypes.set_errno(0)
report("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
keyctl = {"x86_64": 250, "aarch64": 219}[platform.machine()]
ctypes.set_errno(0)
report("keyctl", libc.syscall(keyctl, 0, -3, 0))  # KEYCTL_GET_KEYRING_ID, session keyring
for line in open("/proc/self/status"):
    if line.startswith("Seccomp:"):
        print("Seccomp", line.split()[1])
`
		got := keyValues(mustPython(t, n, a.Name, program))
		if got["Seccomp"] != "2" {
			t.Errorf("Seccomp mode: got %q, want 2 (filter)", got["Seccomp"])
		}
		for _, call := range []string{"unshare", "mount", "keyctl"} {
			if want := fmt.Sprintf("-1 %d", 1); got[call] != want {
				t.Errorf("%s: got rc/errno %q, want %q (EPERM)", call, got[call], want)
			}
		}
	})

	t.Run("no new privileges", func(t *testing.T) {
		status := mustRun(t, n, a.Name, "cat /proc/self/status")
		if got := statusField(status, "NoNewPrivs"); got != "1" {
			t.Errorf("NoNewPrivs: got %q, want 1", got)
		}
	})

	t.Run("capabilities", func(t *testing.T) {
		status := mustRun(t, n, a.Name, "cat /proc/self/status")
		forbidden := map[string]uint{"CAP_NET_RAW": 13, "CAP_MKNOD": 27, "CAP_SYS_ADMIN": 21, "CAP_SYS_MODULE": 16, "CAP_SYS_PTRACE": 19}
		for _, set := range []string{"CapBnd", "CapEff", "CapPrm", "CapInh", "CapAmb"} {
			v, err := strconv.ParseUint(statusField(status, set), 16, 64)
			if err != nil {
				t.Errorf("%s: cannot parse %q", set, statusField(status, set))
				continue
			}
			for name, bit := range forbidden {
				if v&(1<<bit) != 0 {
					t.Errorf("%s %016x: has %s (bit %d), want it cut", set, v, name, bit)
				}
			}
		}
		res := mustFail(t, n, a.Name, "mknod /root/itest-null c 1 3")
		if !strings.Contains(res.Stderr, "Operation not permitted") {
			t.Errorf("mknod: got stderr %q, want Operation not permitted", res.Stderr)
		}
		out := mustPython(t, n, a.Name, `
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print("raw socket opened")
except OSError as e:
    print("refused", e.errno)
`)
		if strings.TrimSpace(out) != "refused 1" {
			t.Errorf("raw socket: got %q, want refused with EPERM (1)", out)
		}
	})

	t.Run("masked paths", func(t *testing.T) {
		const program = `
import os
for p in ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"]:
    try:
        with open(p, "rb") as f:
            print(p, "read", len(f.read(4096)))
    except OSError as e:
        print(p, "error", e.errno)
try:
    print("/sys/firmware", "entries", len(os.listdir("/sys/firmware")))
except OSError as e:
    print("/sys/firmware", "error", e.errno)
for p in ["/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/proc/sysrq-trigger"]:
    try:
        with open(p, "w") as f:
            f.write("pwned")
        print(p, "written")
    except OSError as e:
        print(p, "error", e.errno)
`
		got := keyValues(mustPython(t, n, a.Name, program))
		for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"} {
			if v := got[p]; v != "read 0" && !strings.HasPrefix(v, "error") {
				t.Errorf("%s: got %q, want it empty or unreadable", p, v)
			}
		}
		if v := got["/sys/firmware"]; v != "entries 0" && !strings.HasPrefix(v, "error") {
			t.Errorf("/sys/firmware: got %q, want it empty or unreadable", v)
		}
		for _, p := range []string{"/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/proc/sysrq-trigger"} {
			if v := got[p]; !strings.HasPrefix(v, "error") {
				t.Errorf("write %s: got %q, want an error", p, v)
			}
		}
		if host := strings.TrimSpace(mustRun(t, n, a.Name, "cat /proc/sys/kernel/hostname")); host != a.Name {
			t.Errorf("hostname after the write attempt: got %q, want %q", host, a.Name)
		}
	})

	t.Run("devices", func(t *testing.T) {
		const program = `
import os, stat
for name in sorted(os.listdir("/dev")):
    st = os.lstat("/dev/" + name)
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else \
        "chr" if stat.S_ISCHR(st.st_mode) else "blk" if stat.S_ISBLK(st.st_mode) else "other"
    print(name, kind)
`
		allowed := map[string][]string{
			"null": {"chr"}, "zero": {"chr"}, "full": {"chr"}, "random": {"chr"}, "urandom": {"chr"},
			"tty": {"chr"}, "ptmx": {"chr", "link"}, "pts": {"dir"}, "shm": {"dir"}, "mqueue": {"dir"},
			"fd": {"link"}, "stdin": {"link"}, "stdout": {"link"}, "stderr": {"link"}, "core": {"link"},
		}
		got := keyValues(mustPython(t, n, a.Name, program))
		for name, kind := range got {
			if !slices.Contains(allowed[name], kind) {
				t.Errorf("/dev/%s (%s) is present; want only %v", name, kind, sortedKeys(allowed))
			}
		}
		for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
			if _, ok := got[name]; !ok {
				t.Errorf("/dev/%s is missing", name)
			}
		}
		for _, p := range []string{"/dev/vda", "/dev/sda", "/dev/mem", "/dev/kmsg", "/dev/port", "/dev/nvme0n1"} {
			if res := run(t, n, a.Name, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s exists in the sandbox", p)
			}
		}
	})

	t.Run("read-only image", func(t *testing.T) {
		for _, p := range []string{"/usr/bin/itest-x", "/usr/lib/itest-x", "/.airlock/agent"} {
			res := mustFail(t, n, a.Name, "echo x > "+p)
			if !strings.Contains(res.Stderr, "Read-only file system") && !strings.Contains(res.Stderr, "Permission denied") {
				t.Errorf("write %s: got stderr %q, want EROFS or EACCES", p, res.Stderr)
			}
		}
		marker := "itest-" + randHex(6)
		for _, dir := range []string{"/root", "/home/user", "/etc"} {
			p := filepath.Join(dir, marker)
			mustRun(t, n, a.Name, fmt.Sprintf("echo %s > %s", marker, p))
			if got := strings.TrimSpace(mustRun(t, n, a.Name, "cat "+p)); got != marker {
				t.Errorf("read back %s: got %q, want %q", p, got, marker)
			}
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s written in the sandbox appeared on the host", p)
			}
		}
	})

	t.Run("no view of the host", func(t *testing.T) {
		const program = `
import os
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmd = open("/proc/%d/cmdline" % pid, "rb").read().replace(b"\0", b" ").replace(b"\n", b" ").decode().strip()
    except OSError:
        continue
    print(pid, cmd)
`
		procs := keyValues(mustPython(t, n, a.Name, program))
		if !strings.Contains(procs["1"], "agent") {
			t.Errorf("PID 1 cmdline: got %q, want the agent", procs["1"])
		}
		for pid, cmd := range procs {
			if !strings.Contains(cmd, "agent") && !strings.Contains(cmd, "python3") {
				t.Errorf("process %s %q is visible; want only the agent and this exec", pid, cmd)
			}
		}
		if len(procs) > 4 {
			t.Errorf("got %d processes %v, want the agent and this exec only", len(procs), procs)
		}

		hostRoot, _ := os.ReadDir("/root")
		skeletonRoot := map[string]bool{".bashrc": true, ".profile": true}
		var absent []string
		for _, e := range hostRoot {
			if !skeletonRoot[e.Name()] {
				absent = append(absent, "/root/"+e.Name())
			}
		}
		absent = append(absent, "/etc/shadow", "/etc/gshadow", "/var/lib/airlock", n.Dir, filepath.Join(n.Dir, "airlock.db"),
			"/etc/ssh", "/run/airlock", "/sys/fs/cgroup/pids/"+n.CgroupParent)
		for _, p := range absent {
			if res := run(t, n, a.Name, "test -e '"+p+"'"); res.ExitCode == 0 {
				t.Errorf("host path %s is visible in the sandbox", p)
			}
		}

		if got := strings.TrimSpace(mustRun(t, n, a.Name, "cat /proc/sys/kernel/hostname")); got != a.Name {
			t.Errorf("hostname: got %q, want the sandbox name %q", got, a.Name)
		}

		var ifaces []string
		for _, line := range strings.Split(mustRun(t, n, a.Name, "cat /proc/net/dev"), "\n")[2:] {
			if name, _, ok := strings.Cut(line, ":"); ok {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if !slices.Equal(ifaces, []string{"lo"}) {
			t.Errorf("network interfaces: got %v, want [lo]", ifaces)
		}

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Addr, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- c.RemoteAddr()
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		out := mustPython(t, n, a.Name, fmt.Sprintf(`
import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", %d))
    print("connected")
except OSError as e:
    print("refused", e.errno)
`, port))
		if !strings.HasPrefix(out, "refused") {
			t.Errorf("connect to the host's 127.0.0.1:%d from the sandbox: got %q, want a failure", port, out)
		}
		select {
		case addr := <-accepted:
			t.Errorf("the host's loopback listener accepted a connection from %v", addr)
		case <-time.After(100 * time.Millisecond):
		}
	})

	t.Run("other sandboxes", func(t *testing.T) {
		marker := "itest-" + randHex(6)
		for _, p := range []string{"/root/" + marker, "/tmp/" + marker, "/home/user/" + marker} {
			mustRun(t, n, a.Name, "echo secret > "+p)
			if res := run(t, n, b.Name, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s written in %s is visible in %s", p, a.Name, b.Name)
			}
		}
		if _, err := os.Lstat(filepath.Join(n.Driver.UpperDir(a.ID), "root", marker)); err != nil {
			t.Errorf("file in %s not found in its upper layer on the host: %v", a.Name, err)
		}

		// A process of a is visible in a (the control) and absent in b.
		arg := fmt.Sprintf("4%06d", time.Now().UnixNano()%1000000)
		ses, err := n.Client.StartSession(background, a.Name, api.SessionRequest{Kind: "raw", Argv: []string{"sleep", arg}})
		if err != nil {
			t.Fatalf("start a session in %s: %v", a.Name, err)
		}
		defer n.Client.CloseSession(background, a.Name, ses.ID)
		find := "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '^sleep " + arg + "' || true"
		if got := strings.TrimSpace(mustRun(t, n, a.Name, find)); got != "1" {
			t.Errorf("sleep %s in %s's own view: got %s processes, want 1", arg, a.Name, got)
		}
		if got := strings.TrimSpace(mustRun(t, n, b.Name, find)); got != "0" {
			t.Errorf("sleep %s of %s seen from %s: got %s processes, want 0", arg, a.Name, b.Name, got)
		}
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
