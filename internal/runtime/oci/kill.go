package oci

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime"
)

var _ runtime.Killer = (*Driver)(nil)

// Kill implements runtime.Killer without running the engine: every process in the
// sandbox's cgroup (any hierarchy, any depth) gets SIGKILL through a pidfd, which pins
// it between the check that it is still in that cgroup and the signal, and Kill waits
// on the pidfds until each has ended; then it reads the cgroup again, until no live
// process is left. Killing the container's init makes the kernel end the rest of its
// pid namespace and refuse new forks there, so the rounds end. The engine's record,
// mounts and cgroups stay for Delete (whose engine kill then finds nothing to kill).
func (d *Driver) Kill(ctx context.Context, id string) error {
	path := d.cgroupPath(id)
	d.cg.thaw(path) // a frozen process does not die
	for {
		var fds []int
		for _, pid := range d.cg.procs(path) {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone
			}
			if ended(fd, 0) || !inCgroup(pid, path) {
				unix.Close(fd)
				continue
			}
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				unix.Close(fd)
				closeAll(fds)
				return err
			}
			fds = append(fds, fd)
		}
		if len(fds) == 0 {
			return nil
		}
		err := waitEnded(ctx, fds)
		closeAll(fds)
		if err != nil {
			return err
		}
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ended says whether the process a pidfd names has ended, waiting up to ms for it.
func ended(fd int, ms int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, ms)
	return err == nil && n > 0
}

// waitEnded waits until every process the pidfds name has ended, or ctx is done.
func waitEnded(ctx context.Context, fds []int) error {
	for _, fd := range fds {
		for !ended(fd, 50) {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// inCgroup says whether pid is in the cgroup path, or below it, in some hierarchy.
func inCgroup(pid int, path string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		_, rest, _ := strings.Cut(line, ":")
		_, p, _ := strings.Cut(rest, ":")
		if p == path || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return false
}

// procs lists the processes in the cgroup path and below it, in every hierarchy.
func (c cgroups) procs(path string) []int {
	seen := map[int]bool{}
	var out []int
	for _, dir := range c.dirs(path) {
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// thaw lets a frozen cgroup run again (so that its processes can take a SIGKILL).
func (c cgroups) thaw(path string) {
	if c.v2 {
		f := filepath.Join(cgroupRoot, path, "cgroup.freeze")
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) != "0" {
			os.WriteFile(f, []byte("0"), 0)
		}
		return
	}
	f := filepath.Join(cgroupRoot, "freezer", path, "freezer.state")
	if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) != "THAWED" {
		os.WriteFile(f, []byte("THAWED"), 0)
		// The kernel thaws asynchronously; the state says when it is done.
		for i := 0; i < 100; i++ {
			if b, err := os.ReadFile(f); err != nil || strings.TrimSpace(string(b)) == "THAWED" {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}
