package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/fence"
)

var fenceVerb = &verb{
	name:  "fence",
	args:  "[--workspace DIR] [--access none|ro|rw] [--no-network] -- CMD [ARG...]",
	short: "run a command on this host inside a light fence",
	long: `The command sees the system read-only, the workspace (default: the current
directory) as --access says, and a scratch directory of its own (its TMPDIR, removed
afterwards); not the home directory, /tmp, /run or the daemon's socket. With --no-network
it has only a loopback of its own and may not open TCP connections. Needs Landlock
(Linux 5.13 or later). Run as root, airlock puts the fence up itself and the command
gets no capabilities; anyone else has the local daemon put it up (its fence socket,
beside --socket), with their own ids, or without a daemon needs user namespaces.
Without these nothing runs.
airlock exits with the command's own exit code, or 125 if the fence could not be put up,
126 if the command could not be executed, 127 if it was not found inside the fence.`,
	run: runFence,
}

func runFence(c *cmd, args []string) error {
	workspace := c.fs.String("workspace", "", "project `DIR` the command may reach (default: the current directory)")
	access := c.fs.String("access", "rw", "workspace access `MODE`: none, ro or rw")
	noNetwork := c.fs.Bool("no-network", false, "no network: only a loopback of its own")
	_, command, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	if len(command) == 0 {
		return usagef("missing the command to run (put it after --)")
	}
	switch *access {
	case "none", "ro", "rw":
	default:
		return usagef("--access must be none, ro or rw, not %q", *access)
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	f := fence.Fence{Access: *access, Network: !*noNetwork, Daemon: c.fenceDaemon()}
	if *access != "none" || *workspace != "" {
		f.Workspace = *workspace
		if f.Workspace == "" {
			f.Workspace = wd
		}
	}
	scratch, err := os.MkdirTemp("", "airlock-fence-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	f.Scratch = scratch
	cmd, err := f.Command(c.ctx, command)
	if errors.Is(err, errdefs.ErrInvalidArgument) {
		return usagef("%s", strings.TrimPrefix(err.Error(), "fence: "))
	}
	if err != nil {
		return err
	}
	cmd.Dir = fenceDir(f, wd)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(c.stderr, "airlock %v\n", err) // "airlock fence: …", as the fence's child says it
		return ExitError{fence.ExitSetup}
	}
	err = cmd.Wait()
	var fe *fence.ExitError
	switch {
	case err == nil:
		return nil
	case c.ctx.Err() != nil:
		fmt.Fprintln(c.stderr, "airlock: cancelled")
		return ExitError{exitCancelled}
	case errors.As(err, &fe):
		return ExitError{fe.Code}
	}
	return fmt.Errorf("fence: %w", err)
}

// fenceDir is where the command starts: the current directory when the workspace is
// visible and holds it, else the workspace, else the scratch directory.
func fenceDir(f fence.Fence, wd string) string {
	if f.Workspace == "" || f.Access == "none" {
		return f.Scratch
	}
	ws, err := filepath.EvalSymlinks(f.Workspace)
	if err != nil {
		return f.Workspace
	}
	if rwd, err := filepath.EvalSymlinks(wd); err == nil && (rwd == ws || strings.HasPrefix(rwd, ws+"/")) {
		return rwd
	}
	return ws
}

// fenceDaemon is the fence socket of the local daemon this command would talk to (as
// the client finds it), or "" when it talks to one over TCP.
func (c *cmd) fenceDaemon() string {
	cl, err := client.New(client.Options{Socket: c.socket, Addr: c.addr})
	if err != nil || !cl.Local() {
		return ""
	}
	return fence.SocketPath(cl.Target())
}
