// Package failpoint lets the crash tests stop the daemon dead at a named point of its
// work — the moment a pull meets a bad layer, say — so they can check that a restart
// finds the state whole. A point does nothing unless the daemon was started with its
// name in the AIRLOCK_FAILPOINTS environment variable (comma-separated), which only
// the tests set; then reaching it kills the process with SIGKILL, exactly as an
// operator's kill -9 or the OOM killer would, with no deferred cleanup run.
//
// It must not do anything else: no delays, no injected errors, nothing a caller could
// tell apart from the real failure but the death itself.
package failpoint

import (
	"os"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar names the points to arm.
const EnvVar = "AIRLOCK_FAILPOINTS"

var armed atomic.Pointer[map[string]bool]

// ArmFromEnv arms the points EnvVar names; the daemon calls it once at start.
func ArmFromEnv() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	m := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			m[name] = true
		}
	}
	armed.Store(&m)
}

// Armed lists the armed points, for the daemon's start-up log.
func Armed() []string {
	m := armed.Load()
	if m == nil {
		return nil
	}
	var out []string
	for k := range *m {
		out = append(out, k)
	}
	return out
}

// Hit kills the process at once if the point name is armed.
func Hit(name string) {
	m := armed.Load()
	if m == nil || !(*m)[name] {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; nothing runs after it
}
