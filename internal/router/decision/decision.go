// Package decision holds the router's vocabulary: the isolation profiles and their
// settings, the kinds of work and the places it runs, and the shape of a decision. It
// is apart from package router, which decides (and parses shell with mvdan.cc/sh), so
// that the CLI, which only reads the daemon's decisions and names the profiles, links
// none of the scoring.
//
// Like the router it only describes: nothing that reaches the kernel, the fence or the
// daemon's packages; internal/layers holds it to that.
package decision

import (
	"math"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The profiles. A profile is never stored: Settings.Profile reads it back from four fields.
const (
	ProfileOff    = "off"    // everything on the host, no fence
	ProfileSafe   = "safe"   // host inside the fence by default; risky commands and all code in a sandbox
	ProfileStrict = "strict" // everything in a sandbox, workspace read-only, no network
	ProfileCustom = "custom" // any other combination of the four fields
)

// DefaultProfile is the profile of a fresh installation.
const DefaultProfile = ProfileSafe

// DefaultThreshold is the risk score at or above which the safe profile contains a command.
const DefaultThreshold = 0.5

// Mode says how the router decides where work runs.
type Mode string

const (
	ModeOff    Mode = "off"    // never contain: everything runs on the host, unfenced
	ModeAuto   Mode = "auto"   // contain code always and commands by their risk score
	ModeAlways Mode = "always" // contain everything in scope
)

// Scope says which kinds of work the mode governs. Work out of scope runs on the host
// inside the fence (unless the mode is off).
type Scope string

const (
	ScopeCode Scope = "code" // only code snippets (run-code)
	ScopeAll  Scope = "all"  // code snippets and shell commands
)

// WorkspaceAccess is how a sandbox (or the fence) sees the workspace.
type WorkspaceAccess string

const (
	WorkspaceNone WorkspaceAccess = "none" // not mounted: a clean room
	WorkspaceRO   WorkspaceAccess = "ro"   // mounted read-only
	WorkspaceRW   WorkspaceAccess = "rw"   // mounted read-write
)

// Settings are the router's settings. Mode, Scope, Workspace and Network make the profile
// label; the fields after them tune a profile without changing its label.
type Settings struct {
	Mode      Mode            `json:"mode"`
	Scope     Scope           `json:"scope"`
	Workspace WorkspaceAccess `json:"workspace"`
	Network   bool            `json:"network"`

	// Threshold is the risk score at or above which ModeAuto contains a shell command;
	// 0 means DefaultThreshold.
	Threshold float64 `json:"threshold,omitempty"`
	// CPUs, MemoryBytes and Timeout cap a sandbox's run; 0 leaves the daemon's default.
	CPUs        float64       `json:"cpus,omitempty"`
	MemoryBytes int64         `json:"memory_bytes,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	// Mounts are further host paths given to a sandbox besides the workspace.
	Mounts []ExtraMount `json:"mounts,omitempty"`
}

// ExtraMount is one host path bound into a sandbox.
type ExtraMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// profileLabels are the four fields of each named profile, in the order the error lists them.
var profileLabels = []struct {
	name string
	s    Settings
}{
	// Off: the fields describe the host as it is — the workspace writable, the network there.
	{ProfileOff, Settings{Mode: ModeOff, Scope: ScopeAll, Workspace: WorkspaceRW, Network: true}},
	// Safe: a contained risky command must still do its work on the project (rm -rf build,
	// npm install), so the workspace is writable and the network is there.
	{ProfileSafe, Settings{Mode: ModeAuto, Scope: ScopeAll, Workspace: WorkspaceRW, Network: true}},
	// Strict: untrusted code on a machine that matters; it reads the project, writes only
	// its scratch directory, and cannot call home.
	{ProfileStrict, Settings{Mode: ModeAlways, Scope: ScopeAll, Workspace: WorkspaceRO, Network: false}},
}

// Profiles returns the names ProfileSettings accepts.
func Profiles() []string {
	names := make([]string, len(profileLabels))
	for i, p := range profileLabels {
		names[i] = p.name
	}
	return names
}

// ProfileSettings returns the settings of a named profile, with no tuning.
func ProfileSettings(name string) (Settings, error) {
	for _, p := range profileLabels {
		if p.name == name {
			return p.s, nil
		}
	}
	return Settings{}, errdefs.Invalid("unknown profile %q: want one of off, safe, strict", name)
}

// Profile reads the label back: off, safe or strict when Mode, Scope, Workspace and
// Network match that profile, custom otherwise. Tuning fields never change it.
func (s Settings) Profile() string {
	for _, p := range profileLabels {
		if s.Mode == p.s.Mode && s.Scope == p.s.Scope && s.Workspace == p.s.Workspace && s.Network == p.s.Network {
			return p.name
		}
	}
	return ProfileCustom
}

// EffectiveThreshold is Threshold, or DefaultThreshold when it is 0.
func (s Settings) EffectiveThreshold() float64 {
	if s.Threshold == 0 {
		return DefaultThreshold
	}
	return s.Threshold
}

// Validate reports the first field that holds a value the router does not know.
func (s Settings) Validate() error {
	switch s.Mode {
	case ModeOff, ModeAuto, ModeAlways:
	default:
		return errdefs.Invalid("mode %q: want off, auto or always", s.Mode)
	}
	switch s.Scope {
	case ScopeCode, ScopeAll:
	default:
		return errdefs.Invalid("scope %q: want code or all", s.Scope)
	}
	switch s.Workspace {
	case WorkspaceNone, WorkspaceRO, WorkspaceRW:
	default:
		return errdefs.Invalid("workspace access %q: want none, ro or rw", s.Workspace)
	}
	if math.IsNaN(s.Threshold) || s.Threshold < 0 || s.Threshold > 1 {
		return errdefs.Invalid("threshold %v: want a number from 0 to 1 (0 means the default, %v)", s.Threshold, DefaultThreshold)
	}
	if s.CPUs < 0 || s.MemoryBytes < 0 || s.Timeout < 0 {
		return errdefs.Invalid("cpus, memory and timeout must not be negative")
	}
	for _, m := range s.Mounts {
		if m.Source == "" || m.Target == "" {
			return errdefs.Invalid("mount %q -> %q: want both a source and a target", m.Source, m.Target)
		}
	}
	return nil
}

// Kind is what is to be run.
type Kind string

const (
	KindCommand Kind = "command" // a shell command line, scored by Score
	KindCode    Kind = "code"    // a code snippet (run-code): never judged, always contained unless off
)

// Place is where work runs.
type Place string

const (
	PlaceHost    Place = "host"    // on the host, unfenced (profile off)
	PlaceFence   Place = "fence"   // on the host inside the light fence
	PlaceSandbox Place = "sandbox" // in a sandbox
)

// Decision is where one piece of work runs, and why.
type Decision struct {
	Place Place `json:"place"`
	// Reason says why, for a person.
	Reason string `json:"reason"`
	// Workspace and Network are what the fence or sandbox gives the work.
	Workspace WorkspaceAccess `json:"workspace"`
	Network   bool            `json:"network"`
}
