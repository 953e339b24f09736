package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireFenceThread skips (in CI: fails) unless this process may take WayThread.
func requireFenceThread(t testing.TB) {
	t.Helper()
	if fenceThreadCapable() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("WayThread needs CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP")
	}
	t.Skip("WayThread needs CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP (run as root)")
}

// TestFenceThreadLeavesProcess checks that WayThread walls in the command, not this
// process: the thread that put the fence up ends, and every thread left has the
// process's namespaces, capabilities and no no_new_privs, and may still write outside
// the workspace.
func TestFenceThreadLeavesProcess(t *testing.T) {
	requireFence(t)
	requireFenceThread(t)
	d := newFenceDirs(t)
	before := fenceThreadStates(t)
	for _, network := range []bool{false, true} {
		cmd, _, _ := fenceStart(t, Fence{Workspace: d.ws, Scratch: d.scratch, Network: network}, "true")
		fenceWaitThreadExit(t, cmd.tid)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("fenced true: %v", err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", cmd.tid)); err == nil {
			t.Errorf("the fence thread %d is still a thread of this process", cmd.tid)
		}
	}
	after := fenceThreadStates(t)
	for tid, st := range after {
		if st != before[os.Getpid()] {
			t.Errorf("thread %d after fenced runs: %s; want the process's %s", tid, st, before[os.Getpid()])
		}
	}
	// Write outside the fence from many goroutines, so from several threads.
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() { errs <- os.WriteFile(filepath.Join(d.sibling, fmt.Sprint("out-", i)), nil, 0o644) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("this process, after fenced runs: %v", err)
		}
	}
	if _, err := os.ReadFile(d.key); err != nil {
		t.Errorf("this process, after fenced runs: %v", err)
	}
}

// fenceThreadStates returns, for each thread of this process, its mount and network
// namespaces, capabilities and no_new_privs flag.
func fenceThreadStates(t *testing.T) map[int]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	states := make(map[int]string)
	for _, task := range tasks {
		dir := "/proc/self/task/" + task.Name()
		mnt, err1 := os.Readlink(dir + "/ns/mnt")
		netns, err2 := os.Readlink(dir + "/ns/net")
		status, err3 := os.ReadFile(dir + "/status")
		if err := errors.Join(err1, err2, err3); err != nil {
			continue // the thread ended meanwhile
		}
		st := []string{mnt, netns}
		for _, line := range strings.Split(string(status), "\n") {
			if k, _, _ := strings.Cut(line, ":"); slices.Contains([]string{"CapEff", "CapPrm", "CapBnd", "NoNewPrivs"}, k) {
				st = append(st, strings.Join(strings.Fields(line), " "))
			}
		}
		var tid int
		fmt.Sscan(task.Name(), &tid)
		states[tid] = strings.Join(st, ", ")
	}
	return states
}

// fenceWaitThreadExit waits until thread tid of this process has ended.
func fenceWaitThreadExit(t *testing.T, tid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
	if errors.Is(err, unix.ESRCH) {
		return // already gone
	}
	if err != nil {
		t.Skipf("pidfd of thread %d: %v (Linux 6.9 or later)", tid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := unix.Poll(fds, int(max(time.Until(deadline).Milliseconds(), 0)))
		if errors.Is(err, unix.EINTR) { // the Go runtime's signals interrupt it
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("the fence thread %d did not end within 10 s (%d, %v)", tid, n, err)
		}
		return
	}
}

// TestFenceFailsClosed checks that a fence that cannot be put up runs nothing and says
// why: WayThread's Start fails, WayReexec's child exits ExitSetup.
func TestFenceFailsClosed(t *testing.T) {
	requireFence(t)
	fenceWays(t, func(t *testing.T, w fenceTestWay) {
		d := newFenceDirs(t)
		marker := filepath.Join(d.ws, "ran")
		f := Fence{Workspace: d.ws, Scratch: d.scratch, forceReexec: w.reexec, forceDaemon: w.daemon != "", Daemon: w.daemon}
		cmd, err := f.Command(context.Background(), []string{"touch", marker})
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Dir, cmd.Stderr = d.sibling, &stderr // hidden inside the fence
		err = cmd.Start()
		if err == nil {
			err = cmd.Wait()
		}
		var fe *ExitError
		switch {
		case w.reexec && (!errors.As(err, &fe) || fe.Code != ExitSetup):
			t.Errorf("run from a hidden directory: %v, want exit %d", err, ExitSetup)
		case !w.reexec && (err == nil || errors.As(err, &fe)):
			t.Errorf("Start from a hidden directory: %v, want an error", err)
		}
		if why := err.Error() + stderr.String(); !strings.Contains(why, "not visible inside the fence") {
			t.Errorf("error %q, stderr %q; want them to say the directory is not visible", err, stderr.String())
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("the command ran: %s exists", marker)
		}
	})
}
