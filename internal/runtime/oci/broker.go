package oci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime/oci/sidecar"
)

// The agent channel of an engine with its own kernel (gVisor's runsc). Its kernel cannot
// listen on a host socket it was given, but it can receive connected host sockets over
// one. So a small broker process on the host listens on the agent's socket in
// <dir>/ctl and hands every connection it accepts to the agent as a descriptor, over a
// socket pair whose other end is the container's fd 4 (the agent's --accept-fd). The
// broker is the listener the daemon's SO_PEERCRED check expects; it carries no data,
// lives in the sandbox's cgroup (so it outlives a daemon restart like the container
// does, and the sandbox pays for it), and ends when the sandbox does (its end of the
// pair reads end-of-file).

// startBroker starts the broker on the bound socket sock and returns the container's end
// of the hand-off pair. The broker is its own session, so it outlives the daemon.
func (d *Driver) startBroker(id string, sock, logf *os.File) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "handoff"), os.NewFile(uintptr(fds[1]), "handoff")
	defer mine.Close()
	cmd := exec.Command(d.opts.AgentBinary, sidecar.BrokerCommand)
	cmd.ExtraFiles = []*os.File{sock, mine}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		theirs.Close()
		return nil, fmt.Errorf("start agent broker: %w", err)
	}
	go cmd.Wait() // reaped here while the daemon that started it lives
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(d.ctlDir(id), "broker.pid"), []byte(pid+"\n"), 0o600); err != nil {
		cmd.Process.Kill()
		theirs.Close()
		return nil, err
	}
	return theirs, nil
}

// adoptBroker moves a sandbox's broker into its cgroup, once the engine has made it,
// and keeps the OOM killer away from it: the sandbox's kernel is the one to end.
func (d *Driver) adoptBroker(id string) error {
	pid, err := readPid(filepath.Join(d.ctlDir(id), "broker.pid"))
	if err != nil {
		return err
	}
	os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("-1000"), 0)
	return d.cg.join(d.cgroupPath(id), pid)
}

// stopBroker ends a sandbox's broker, if it has one, and waits until it is gone.
func (d *Driver) stopBroker(id string) {
	pid, err := readPid(filepath.Join(d.ctlDir(id), "broker.pid"))
	if err != nil {
		return
	}
	// The pid is the broker's only while that process lives; the pidfd pins it.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !slices.Contains(strings.Split(string(cmdline), "\x00"), sidecar.BrokerCommand) {
		return
	}
	if unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) == nil {
		waitExit(pidfd)
	}
}
