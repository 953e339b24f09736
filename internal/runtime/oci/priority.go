package oci

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime"
)

// Idle priority. A warm pool's member is started with runc from a thread at SCHED_IDLE,
// which runc, its init and the agent inherit: the start of a member (most of its CPU is
// runc's, outside the sandbox's cgroup) then takes only CPU that nothing else wants,
// and a refill that starts while a burst of claims runs its first execs does not slow
// them. At the claim, Foreground puts every task of the sandbox back to the normal
// policy, so that the claimed sandbox and its agent never stay at idle priority.

// startIdle starts cmd at idle CPU priority; where the policy cannot be set (a kernel
// or a confinement that refuses it) it starts cmd as it is.
func startIdle(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		// The thread takes the policy for the fork; it is never unlocked, so it ends
		// with the goroutine and no other goroutine runs at idle priority on it.
		goruntime.LockOSThread()
		_ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0)
		errc <- cmd.Start()
	}()
	return <-errc
}

// Foreground implements runtime.Foregrounder: each task of the sandbox's cgroup that is
// at idle priority is put at the normal one, again until none is left (a thread made
// meanwhile by one still idle inherits its policy). Only tasks at idle priority are
// changed, so a task id that was reused meanwhile by a process of the host is left alone.
func (d *Driver) Foreground(ctx context.Context, id string) error {
	if d.opts.Engine.Sentry {
		return nil // its sandboxes start at the normal priority
	}
	tasks := filepath.Join(cgroupRoot, "cpu", d.cgroupPath(id), "tasks")
	if d.cg.v2 {
		tasks = filepath.Join(cgroupRoot, d.cgroupPath(id), "cgroup.threads")
	}
	for range 8 {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := os.ReadFile(tasks)
		if err != nil {
			return err
		}
		changed := 0
		for _, f := range strings.Fields(string(b)) {
			tid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if attr, err := unix.SchedGetAttr(tid, 0); err != nil || attr.Policy != unix.SCHED_IDLE {
				continue
			}
			if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			changed++
		}
		if changed == 0 {
			return nil
		}
	}
	return errors.New("the sandbox's tasks kept starting at idle priority")
}

var _ runtime.Foregrounder = (*Driver)(nil)
