// Package gvisor checks a host's gVisor runsc for Airlock. There is no runsc driver yet:
// this package finds runsc, says whether it can run here, and says why not, for
// `airlock status`. It must not start containers or touch the store.
//
// What it found on Debian 12 with kernel 6.18 and cgroup v1: a runsc built with
// `go install` and cgo enabled is dynamically linked, and its gofer, after pivoting into
// a root that holds only /proc, /root and /etc, re-executes /proc/self/exe to unmount
// /proc. The kernel finds the binary through the magic link but not its ELF interpreter
// (/lib64/ld-linux-x86-64.so.2) in the new root, so the exec fails with "fork/exec
// /proc/self/exe: no such file or directory". The same runsc built with CGO_ENABLED=0
// is static, and `runsc --platform=systrap --network=none do echo hi` works.
//
// It guards no hostile surface: it reads only the runsc binary the node's PATH names.
package gvisor

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
)

// Probe looks for runsc in PATH and reports whether it could run sandboxes here. ok is
// false when there is no runsc at all, so a node without one shows nothing. The answer
// for one binary (path, size, modification time) is kept: status is polled, and
// reading the ELF file and running runsc every time would cost a process per poll.
func Probe(ctx context.Context) (c runtime.Check, ok bool) {
	path, err := exec.LookPath("runsc")
	if err != nil {
		return runtime.Check{}, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return runtime.Check{}, false
	}
	key := probeKey{path, fi.Size(), fi.ModTime()}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.key != key {
		cache.key, cache.check = key, probePath(ctx, path)
	}
	return cache.check, true
}

type probeKey struct {
	path  string
	size  int64
	mtime time.Time
}

// cache is the last binary Probe looked at and what it found.
var cache struct {
	mu    sync.Mutex
	key   probeKey
	check runtime.Check
}

func probePath(ctx context.Context, path string) runtime.Check {
	c := runtime.Check{Name: "gvisor runsc", Optional: true}
	static, err := isStatic(path)
	switch {
	case err != nil:
		c.Detail = fmt.Sprintf("%s: %v", path, err)
		c.Degrades = "runsc cannot be used: its binary could not be read"
		return c
	case !static:
		c.Detail = path + " is dynamically linked"
		c.Degrades = "runsc's gofer re-executes itself inside a root without the dynamic loader and fails " +
			`("fork/exec /proc/self/exe: no such file or directory"); build runsc with CGO_ENABLED=0`
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		c.Detail = fmt.Sprintf("%s --version: %v", path, err)
		c.Degrades = "runsc cannot be used: it does not run"
		return c
	}
	version, _, _ := bytes.Cut(out, []byte("\n"))
	c.OK = true
	c.Detail = fmt.Sprintf("%s (%s, static, platform systrap); no Airlock runtime uses it yet", path, version)
	return c
}

// isStatic says whether the ELF file at path has no interpreter.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
