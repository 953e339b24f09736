package oci

import (
	"os/exec"
	"strconv"
)

// Engine is the OCI runtime program a Driver runs its containers with. runc is the
// default; gVisor's runsc takes the same bundle and commands with a few differences,
// which the fields below name.
type Engine struct {
	// Name is what errors and status call the engine ("runc", "runsc").
	Name string
	// Path is the binary.
	Path string
	// Args are global flags given before every command.
	Args []string
	// PassFDs passes the container's extra descriptors one by one (runsc's
	// --pass-fd host:guest) instead of keeping them in place (runc's --preserve-fds).
	PassFDs bool
	// Sentry says the engine answers system calls itself in a user-space kernel: the
	// process that listens on the agent's socket is the sandbox's kernel (the process
	// the pid file names), and sandbox code cannot make host system calls.
	Sentry bool
	// Checkpoint says the engine saves a container's memory and processes and restores
	// them (runsc's checkpoint and restore; checkpoint.go).
	Checkpoint bool
	// Logs, when set, returns the global flags that make the engine write its own logs
	// of a start into dir, one file per process, each named *.log (runsc: its run, boot
	// and gofer logs). The driver empties dir before every start, caps the files as it
	// caps the agent's log, and adds the last lines of each to the error of a start
	// that fails.
	Logs func(dir string) []string
}

// Runc is the engine for the runc binary at path ("" finds it on PATH).
func Runc(path string) (Engine, error) {
	if path == "" {
		p, err := exec.LookPath("runc")
		if err != nil {
			return Engine{}, err
		}
		path = p
	}
	return Engine{Name: "runc", Path: path}, nil
}

// passFDs returns the flags that give the container the descriptors the driver puts at
// 3, 4, ... of the engine's own process, at the same numbers inside.
func (e Engine) passFDs(n int) []string {
	if !e.PassFDs {
		return []string{"--preserve-fds", strconv.Itoa(n)}
	}
	var args []string
	for fd := 3; fd < 3+n; fd++ {
		args = append(args, "--pass-fd", strconv.Itoa(fd)+":"+strconv.Itoa(fd))
	}
	return args
}
