// Package version holds the one version of an Airlock build, which the CLI and the
// daemon both report, and the names of the build's binaries. It imports nothing of
// Airlock and guards no hostile surface.
package version

import "runtime/debug"

// Version is set by the build (make build: -ldflags -X with `git describe`). Empty, the
// version comes from the commit Go recorded in the binary, or is "dev".
var Version = ""

// The binaries of a build besides the CLI's (airlock), installed beside it: the CLI runs
// them for their verbs (serve, check-config; agent) and the daemon installs the agent's
// into sandboxes.
const (
	DaemonBinary = "airlockd"
	AgentBinary  = "airlock-agent"
)

// String is the build's version.
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev+" + rev
}
