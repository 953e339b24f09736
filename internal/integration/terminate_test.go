package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/testenv"
)

// pidfds opens a pidfd of each of pids (those still there).
func pidfds(t *testing.T, pids []int) map[int]int {
	t.Helper()
	fds := map[int]int{}
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		}
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return fds
}

// stillRunning lists the processes of fds that have not ended (a zombie has).
func stillRunning(fds map[int]int) []int {
	var out []int
	for pid, fd := range fds {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err != nil || n == 0 {
			out = append(out, pid)
		}
	}
	return out
}

// procsOf lists the processes in sandbox id's cgroup under parent, in any hierarchy.
func procsOf(parent, id string) []int {
	seen := map[int]bool{}
	var out []int
	for _, dir := range testenv.CgroupDirs(parent) {
		b, _ := os.ReadFile(filepath.Join(dir, id, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// host says where a node keeps a runtime's sandboxes: its state directory, the
// directory of the sandboxes, the engine and its root, the cgroup parent.
type host struct {
	state, sandboxes, engine, engineRoot, cgroupParent string
}

// nodeHost is host for a testenv node's default runtime.
func nodeHost(n *testenv.Node) host {
	if n.Runsc != nil {
		path, _ := gvisor.Find()
		return host{n.Dir, filepath.Join(n.Dir, "sandboxes-runsc"), path, filepath.Join(n.Dir, "runsc"), n.CgroupParent + "-runsc"}
	}
	return host{n.Dir, filepath.Join(n.Dir, "sandboxes"), "runc", filepath.Join(n.Dir, "runc"), n.CgroupParent}
}

// leftOf lists what h still has of sandbox id: a container of the engine, a mount, a
// cgroup or a directory named by it.
func (h host) leftOf(id string) []string {
	var out []string
	if err := exec.Command(h.engine, "--root", h.engineRoot, "state", "airlock-"+id).Run(); err == nil {
		out = append(out, "container airlock-"+id)
	}
	for _, m := range testenv.MountsUnder(h.state) {
		if strings.Contains(m, id) {
			out = append(out, "mount "+m)
		}
	}
	for _, d := range testenv.CgroupDirs(h.cgroupParent) {
		if _, err := os.Stat(filepath.Join(d, id)); err == nil {
			out = append(out, "cgroup "+filepath.Join(d, id))
		}
	}
	if _, err := os.Stat(filepath.Join(h.sandboxes, id)); err == nil {
		out = append(out, "directory "+filepath.Join(h.sandboxes, id))
	}
	return out
}

// TestTerminateAnswersThenCleansUp: when terminate answers, no process of the sandbox
// runs; its name makes a new sandbox at once, with a uid range of its own; the old
// one's container, mounts, cgroup, network and directory then go in the background,
// and nothing of the new one goes with them.
func TestTerminateAnswersThenCleansUp(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Network: true})
	old := n.Create(t, api.CreateSandboxRequest{Name: "again"})
	h := nodeHost(n)
	mustRun(t, n, "again", "setsid sleep 1000 </dev/null >/dev/null 2>&1 &")
	pids := procsOf(h.cgroupParent, old.ID)
	if len(pids) == 0 {
		t.Fatalf("the sandbox's cgroup holds no process")
	}
	fds := pidfds(t, pids)

	resp, err := n.Client.Terminate(n.Ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	if left := stillRunning(fds); len(left) > 0 {
		t.Errorf("processes %v of the sandbox still run when terminate answered", left)
	}
	if resp.Sandbox == nil || resp.Sandbox.State != api.StateTerminated {
		t.Errorf("terminate answered %+v; want the sandbox terminated", resp.Sandbox)
	}

	fresh := n.Create(t, api.CreateSandboxRequest{Name: "again"})
	if fresh.ID == old.ID {
		t.Fatalf("the new sandbox has the old one's id %s", old.ID)
	}
	if err := n.Manager.WaitCleanups(n.Ctx); err != nil {
		t.Fatal(err)
	}
	if left := h.leftOf(old.ID); len(left) > 0 {
		t.Errorf("after its cleanup the terminated sandbox left %v", left)
	}
	if ids, _ := n.Network.List(); strings.Contains(fmt.Sprint(ids), old.ID) {
		t.Errorf("after its cleanup the terminated sandbox's network is still there: %v", ids)
	}
	if _, err := os.Stat(n.Network.FilesDir(old.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the terminated sandbox's network files are still there (%v)", err)
	}
	if out := mustRun(t, n, "again", "echo ok"); out != "ok\n" {
		t.Errorf("the new sandbox of the name after the old one's cleanup: %q; want ok", out)
	}
	if pending, _ := n.Manager.Cleanups(n.Ctx); len(pending) != 0 {
		t.Errorf("cleanups still pending: %+v", pending)
	}
}

// gcLeftovers is `airlock gc --dry-run`'s answer.
func gcLeftovers(d *daemon) []api.Leftover {
	d.t.Helper()
	var res api.GCResult
	if err := json.Unmarshal([]byte(d.must("gc", "--dry-run", "-o", "json")), &res); err != nil {
		d.t.Fatal(err)
	}
	return res.Leftovers
}

// waitCleanups waits until gc --dry-run shows no terminated sandbox's cleanup pending.
func (d *daemon) waitCleanups() {
	d.t.Helper()
	err := retry(60*time.Second, func() error {
		for _, l := range gcLeftovers(d) {
			if strings.Contains(l.Reason, "cleanup is pending") {
				return fmt.Errorf("gc --dry-run still shows %+v", l)
			}
		}
		return nil
	})
	if err != nil {
		d.t.Fatal(err)
	}
}

// TestTerminateCleanupSurvivesAKilledDaemon: a terminate answers while its cleanup
// cannot finish (a mount of the test's own is in the sandbox's directory); the failed
// cleanup shows in gc, the name is free, the daemon is killed with SIGKILL before the
// cleanup could run, and the restarted daemon finishes it.
func TestTerminateCleanupSurvivesAKilledDaemon(t *testing.T) {
	d := startDaemon(t)
	d.must("create", "held")
	id := d.get("held").ID
	state := filepath.Join(d.dir, "state")
	hold := filepath.Join(state, "sandboxes", id, "hold")
	if err := os.Mkdir(hold, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", hold, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	unmount := func() { unix.Unmount(hold, unix.MNT_DETACH) }
	defer unmount()
	h := host{state, filepath.Join(state, "sandboxes"), "runc", filepath.Join(state, "runc"), d.cgroup}
	if len(procsOf(h.cgroupParent, id)) == 0 {
		t.Fatalf("the sandbox's cgroup holds no process before terminate")
	}

	d.must("rm", "held")
	if procs := procsOf(h.cgroupParent, id); len(procs) > 0 {
		t.Errorf("processes %v are still in the sandbox's cgroup when rm returned", procs)
	}
	err := retry(30*time.Second, func() error {
		for _, l := range gcLeftovers(d) {
			if l.SandboxID == id && strings.Contains(l.Reason, "failed attempts") {
				return nil
			}
		}
		return fmt.Errorf("gc --dry-run does not show the failed cleanup of %s: %+v", id, gcLeftovers(d))
	})
	if err != nil {
		t.Fatal(err)
	}
	d.must("create", "held") // the name is free while the old one's cleanup is pending

	d.stop(syscall.SIGKILL)
	unmount()
	d.start()
	d.waitCleanups()
	if left := h.leftOf(id); len(left) > 0 {
		t.Errorf("after the restart finished its cleanup, the terminated sandbox left %v", left)
	}
	if out := d.must("exec", "held", "--", "echo", "ok"); out != "ok\n" {
		t.Errorf("the new sandbox of the name after the restart: %q; want ok", out)
	}
}
