package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestRunscIsolation checks, from the host and from inside, what keeps a sandbox that
// runs under gVisor apart: gVisor's kernel answers sandbox code, so the checks that
// TestIsolation makes of the host kernel's view (uid maps, seccomp mode) are made here
// of the host processes that run the sandbox. A runc sandbox on the same node stays
// runc.
func TestRunscIsolation(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc"})
	a := n.Create(t, api.CreateSandboxRequest{Name: "gv-a", Limits: api.Limits{Memory: 256 << 20, PIDs: 64}})
	b := n.Create(t, api.CreateSandboxRequest{Name: "gv-b"})
	r := n.Create(t, api.CreateSandboxRequest{Name: "gv-runc", Runtime: "runc"})
	if a.Runtime != "runsc" || r.Runtime != "runc" {
		t.Fatalf("runtimes: %q and %q; want runsc (the node's default) and runc (asked for)", a.Runtime, r.Runtime)
	}
	parent := n.CgroupParent + "-runsc"
	cgFile := func(id, controller, file string) string {
		p := filepath.Join("/sys/fs/cgroup", controller, parent, id, file)
		if cgroupV2() {
			p = filepath.Join("/sys/fs/cgroup", parent, id, file)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read the sandbox's cgroup: %v", err)
		}
		return strings.TrimSpace(string(data))
	}

	t.Run("gVisor kernel", func(t *testing.T) {
		if out := mustRun(t, n, a.Name, "dmesg 2>/dev/null | head -1; uname -r"); !strings.Contains(out, "gVisor") && !strings.HasPrefix(strings.TrimSpace(out), "4.4") {
			t.Errorf("gv-a does not run on gVisor's kernel: %q", out)
		}
		if out := mustRun(t, n, r.Name, "dmesg 2>&1 | head -1"); strings.Contains(out, "gVisor") {
			t.Errorf("gv-runc runs on gVisor: %q", out)
		}
	})

	t.Run("host processes", func(t *testing.T) {
		procs := strings.Fields(cgFile(a.ID, "pids", "cgroup.procs"))
		if len(procs) < 2 {
			t.Fatalf("sandbox cgroup holds %v; want gVisor's kernel, its gofer and the agent's broker", procs)
		}
		var bases []uint64
		for _, p := range procs {
			pid, _ := strconv.Atoi(p)
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmd), "_agent-broker") {
				continue // the host's own: it holds the agent's socket and runs nothing of the sandbox
			}
			uid, _ := strconv.ParseUint(strings.Fields(statusField(string(status), "Uid"))[0], 10, 32)
			if uid == 0 {
				t.Errorf("host pid %d (%s) runs as root", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
			}
			bases = append(bases, uid)
			if mode := statusField(string(status), "Seccomp"); mode != "2" {
				t.Errorf("host pid %d runs with seccomp mode %q; want 2 (filter)", pid, mode)
			}
		}
		if len(bases) == 0 {
			t.Fatal("no host process of the sandbox found")
		}
		for _, u := range bases[1:] {
			if u != bases[0] {
				t.Errorf("the sandbox's host processes run as uids %v; want one", bases)
			}
		}
		other := strings.Fields(cgFile(b.ID, "pids", "cgroup.procs"))
		for _, p := range other {
			pid, _ := strconv.Atoi(p)
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if f := strings.Fields(statusField(string(status), "Uid")); len(f) > 0 && f[0] == strconv.FormatUint(bases[0], 10) {
				t.Errorf("gv-a and gv-b both run as host uid %d", bases[0])
			}
		}
	})

	t.Run("limits on the host", func(t *testing.T) {
		if got := cgFile(a.ID, "memory", "memory.limit_in_bytes"); !cgroupV2() && got != strconv.Itoa(256<<20) {
			t.Errorf("memory limit: %s; want %d", got, 256<<20)
		}
		if got := strings.TrimSpace(mustRun(t, n, a.Name, "awk '/MemTotal/ {print $2}' /proc/meminfo")); got != strconv.Itoa(256<<10) {
			t.Errorf("the sandbox sees %s KiB of memory; want its limit, %d", got, 256<<10)
		}
	})

	t.Run("no view of the host or of other sandboxes", func(t *testing.T) {
		mustRun(t, n, b.Name, "echo b-secret > /root/secret")
		for _, p := range []string{n.Dir, filepath.Join(n.Dir, "airlock.db"), "/etc/shadow", "/sys/fs/cgroup/pids/" + parent} {
			if res := run(t, n, a.Name, "test -e '"+p+"'"); res.ExitCode == 0 {
				t.Errorf("host path %s is visible in the sandbox", p)
			}
		}
		if out := mustRun(t, n, a.Name, "cat /proc/self/mountinfo; grep -rl b-secret /root /tmp /run /var /home /srv /mnt 2>/dev/null; true"); strings.Contains(out, b.ID) || strings.Contains(out, n.Dir) || strings.Contains(out, "/root/secret") {
			t.Errorf("gv-a sees gv-b or the node's paths:\n%s", out)
		}
	})

	t.Run("files persist across suspend and resume", func(t *testing.T) {
		mustRun(t, n, a.Name, "echo kept > /root/kept")
		if _, err := n.Client.Suspend(background, a.Name); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Resume(background, a.Name); err != nil {
			t.Fatal(err)
		}
		if got := mustRun(t, n, a.Name, "cat /root/kept"); got != "kept\n" {
			t.Errorf("after resume: %q", got)
		}
	})
}

// TestRunscAfterDaemonRestart starts gVisor sandboxes on a daemon with networking in a
// subnet of its own, then restarts the daemon on the same state directory, checks that
// its status calls runsc usable and starts more, several at once. At start the daemon closes its state directory to other host
// users; gVisor's gofer opens each sandbox's root as the sandbox's own uid and its
// kernel reads the agent binary to load it, so both must stay reachable by that uid
// (a restart once made every runsc start fail: "cannot read client sync file").
func TestRunscAfterDaemonRestart(t *testing.T) {
	testenv.Runsc(t)
	d := startDaemonB(t)
	d.must("create", "--runtime", "runsc", "gv-first")
	d.stop(syscall.SIGTERM)
	d.start()
	// The daemon's status starts a test sandbox, under the daemon's own umask.
	var st api.Status
	if err := json.Unmarshal([]byte(d.must("status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(st.Checks, func(c api.Check) bool { return c.Name == "runtime runsc" }); i < 0 || !st.Checks[i].OK {
		t.Errorf("after a restart the status says of runsc: %+v", st.Checks)
	}
	names := []string{"gv-again-1", "gv-again-2", "gv-again-3"}
	var wg sync.WaitGroup
	errs := make([]string, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, errOut, code := d.airlock("create", "--runtime", "runsc", name); code != 0 {
				errs[i] = fmt.Sprintf("create %s after a restart: exit %d\n%s%s", name, code, out, errOut)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, name := range append(names, "gv-first") {
		if out := d.must("exec", name, "--", "echo", "up"); out != "up\n" {
			t.Errorf("exec in %s: %q, want \"up\\n\"", name, out)
		}
	}
}

// TestRunscStatusStartsASandbox checks that the node's status does not call runsc usable
// while sandboxes cannot start under it: the check starts a test sandbox, and again
// after a start failed, and says why.
func TestRunscStatusStartsASandbox(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc"})
	runsc := func() api.Check {
		t.Helper()
		st, err := n.Client.Status(background)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Checks {
			if c.Name == "runtime runsc" {
				return c
			}
		}
		t.Fatalf("no runsc check in %+v", st.Checks)
		return api.Check{}
	}
	if c := runsc(); !c.OK || !strings.Contains(c.Detail, "a test sandbox started") {
		t.Fatalf("a working runsc: %+v; want OK, a test sandbox started", c)
	}
	// The sandboxes' uids can no longer reach their roots: every start fails.
	root := filepath.Join(n.Dir, "sandboxes-runsc")
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Create(background, api.CreateSandboxRequest{Name: "gv-fails"}); err == nil {
		t.Fatal("a sandbox started under runsc with a root its uid cannot reach")
	}
	c := runsc()
	if c.OK || c.Degrades == "" || !strings.Contains(c.Detail, "a test sandbox failed to start") || !strings.Contains(c.Detail, "permission denied") {
		t.Errorf("after a failed start: %+v; want degraded, saying the test sandbox failed and why", c)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	n.Create(t, api.CreateSandboxRequest{Name: "gv-works"})
	if c := runsc(); !c.OK {
		t.Errorf("after a start that worked: %+v; want OK again", c)
	}
}
