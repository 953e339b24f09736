package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Way is how a fence is put up around a command.
type Way string

const (
	// WayThread puts the walls up on a locked OS thread of this process, which then
	// starts the command and ends. It needs the capabilities to make mount and network
	// namespaces (root, in practice), and costs about what a plain fork and exec costs.
	WayThread Way = "thread"
	// WayReexec starts this binary again in new user, mount and network namespaces
	// (ChildMain), which puts the walls up and execs the command. Any user can, at
	// the cost of the binary starting again.
	WayReexec Way = "reexec"
	// WayDaemon has an Airlock daemon, which may make the namespaces, take
	// WayThread's steps for a caller that may not, with the caller's ids; the command
	// is the daemon's child, with the caller's standard input, output and error.
	WayDaemon Way = "daemon"
)

// Cmd is a command that runs inside a fence. Set its fields as an exec.Cmd's, then
// Run it, or Start it and Wait.
type Cmd struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the command's environment; nil means this process's. The fence sets TMPDIR
	// to the scratch directory, and looks argv[0] up on Env's PATH.
	Env []string
	// Dir is the working directory, which must be visible inside the fence (the
	// workspace or the scratch directory); empty means the current directory.
	Dir string
	// WaitDelay bounds how long Wait waits, once the command has ended or its context is
	// done, for its output to close, as exec.Cmd.WaitDelay does.
	WaitDelay time.Duration

	ctx  context.Context
	argv []string
	spec fenceSpec
	abi  int
	way  Way

	cmd    *exec.Cmd
	failed *ExitError // the command could not be executed (WayThread, WayDaemon)
	tid    int        // the thread that put the fence up (WayThread), for tests

	failedMsg strings.Builder // in the daemon: why the command could not be executed
	conn      *net.UnixConn   // WayDaemon: the connection to the daemon
	remote    *fenceRemote    // WayDaemon: the started command's end of it
	caller    *fenceCaller    // in the daemon: whose fence WayThread puts up
}

// ExitError is what Wait returns when the fenced command did not exit 0.
type ExitError struct {
	// Code is the command's exit code, ExitSetup, ExitNoExec or
	// ExitNotFound, or 128 plus the signal that ended the command.
	Code int
	// Signal is the signal that ended the command, or 0.
	Signal syscall.Signal
}

func (e *ExitError) Error() string {
	if e.Signal != 0 {
		return "fenced command: " + e.Signal.String()
	}
	return "fenced command: exit status " + strconv.Itoa(e.Code)
}

// ExitCode returns e.Code.
func (e *ExitError) ExitCode() int { return e.Code }

// Way reports how the fence is put up for this command.
func (c *Cmd) Way() Way { return c.way }

// Start puts up the fence and starts the command in it. When Start returns an error the
// command did not run; with WayThread that includes a fence that could not be put up
// (with WayReexec, Wait reports it as ExitSetup). A command that is not found or
// cannot be executed inside the fence is reported by Wait, as ExitNotFound or
// ExitNoExec, after a line on Stderr.
func (c *Cmd) Start() error {
	if c.cmd != nil || c.failed != nil || c.remote != nil {
		return errors.New("fence: already started")
	}
	switch c.way {
	case WayThread:
		return c.startThread()
	case WayDaemon:
		return c.startDaemon()
	}
	b, err := json.Marshal(c.spec)
	if err != nil {
		return err
	}
	args := append([]string{ChildCommand, string(b), "--"}, c.argv...)
	cmd := exec.CommandContext(c.ctx, "/proc/self/exe", args...)
	cmd.Args[0] = "airlock-fence"
	cmd.SysProcAttr = fenceSysProcAttr(c.spec.Network)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env, cmd.Dir = c.Stdin, c.Stdout, c.Stderr, c.Env, c.Dir
	cmd.WaitDelay = c.WaitDelay
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	c.cmd = cmd
	return nil
}

// Wait waits for the command to end. It returns nil when it exited 0, a *ExitError
// when it exited otherwise or could not be executed, and another error when copying its
// input or output failed.
func (c *Cmd) Wait() error {
	if c.failed != nil {
		return c.failed
	}
	if c.remote != nil {
		return c.remote.wait(c.WaitDelay)
	}
	if c.cmd == nil {
		return errors.New("fence: not started")
	}
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &ExitError{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return &ExitError{Code: ee.ExitCode()}
}

// Run starts the command and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}
