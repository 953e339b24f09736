// Package gvisor runs sandboxes under gVisor's runsc (platform systrap, which needs no
// KVM) through the OCI driver, and checks a host's runsc for `airlock status`. It must
// not touch the store or know about the sandbox state machine.
//
// What it found on Debian 12 with kernel 6.18 and cgroup v1: a runsc built with
// `go install` and cgo enabled is dynamically linked, and its gofer, after pivoting into
// a root that holds only /proc, /root and /etc, re-executes /proc/self/exe to unmount
// /proc. The kernel finds the binary through the magic link but not its ELF interpreter
// (/lib64/ld-linux-x86-64.so.2) in the new root, so the exec fails with "fork/exec
// /proc/self/exe: no such file or directory". The same runsc built with CGO_ENABLED=0
// is static and runs sandboxes here, cgroup v1 limits and user namespaces included.
// gVisor's kernel cannot listen on a host socket it is given, so its agent channel goes
// through the OCI driver's broker (runtime/oci/broker.go).
//
// Hostile surfaces are the OCI driver's; this package reads only the runsc binary the
// node's configuration or PATH names.
package gvisor

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
)

// InstallPath is where scripts/runsc.sh puts the static runsc it builds.
const InstallPath = "/usr/local/libexec/airlock/runsc"

// Find looks for runsc on PATH and at InstallPath, and returns the first that is
// statically linked, else the first found (for Check to say why it cannot run); ok is
// false when there is none.
func Find() (path string, ok bool) {
	var found []string
	if p, err := exec.LookPath("runsc"); err == nil {
		found = append(found, p)
	}
	if _, err := os.Stat(InstallPath); err == nil {
		found = append(found, InstallPath)
	}
	for _, p := range found {
		if static, err := isStatic(p); err == nil && static {
			return p, true
		}
	}
	if len(found) == 0 {
		return "", false
	}
	return found[0], true
}

// Probe looks for runsc on PATH and reports whether it could run sandboxes here, for a
// node that does not run it; ok is false when there is no runsc at all, so a node
// without one shows nothing. It runs what it finds: a daemon checks first that no user
// but root could have put it there.
func Probe(ctx context.Context) (c runtime.Check, ok bool) {
	path, ok := Find()
	if !ok {
		return runtime.Check{}, false
	}
	return Check(ctx, path), true
}

// Check says whether the runsc at path can run sandboxes here, with its version and
// platform. The answer for one binary (path, size, modification time) is kept: status
// is polled, and reading the ELF file and running runsc every time would cost a
// process per poll.
func Check(ctx context.Context, path string) runtime.Check {
	fi, err := os.Stat(path)
	if err != nil {
		return runtime.Check{Name: "gvisor runsc", Optional: true, Detail: err.Error(), Degrades: "runsc cannot be used"}
	}
	key := probeKey{path, fi.Size(), fi.ModTime()}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.key != key {
		cache.key, cache.check = key, probePath(ctx, path)
	}
	return cache.check
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
	if bytes.Contains(version, []byte("VERSION_MISSING")) {
		// go install leaves the version unset; the module version is in the build info.
		if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Version != "" {
			version = []byte("runsc " + bi.Main.Version)
		}
	}
	c.OK = true
	c.Detail = fmt.Sprintf("%s (%s, static, platform %s)", path, version, Platform)
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
