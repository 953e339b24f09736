package router

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func mustProfile(t *testing.T, name string) Settings {
	t.Helper()
	s, err := ProfileSettings(name)
	if err != nil {
		t.Fatalf("ProfileSettings(%q): %v", name, err)
	}
	return s
}

func TestProfileRoundTrip(t *testing.T) {
	for _, name := range Profiles() {
		s := mustProfile(t, name)
		if got := s.Profile(); got != name {
			t.Errorf("ProfileSettings(%q).Profile() = %q, want %q", name, got, name)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("profile %s does not validate: %v", name, err)
		}
	}
	if got, want := strings.Join(Profiles(), ","), "off,safe,strict"; got != want {
		t.Errorf("Profiles() = %s, want %s", got, want)
	}
}

func TestProfileFields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      Mode
		workspace WorkspaceAccess
		network   bool
	}{
		{ProfileOff, ModeOff, WorkspaceRW, true},
		{ProfileSafe, ModeAuto, WorkspaceRW, true},
		{ProfileStrict, ModeAlways, WorkspaceRO, false},
	} {
		s := mustProfile(t, tc.name)
		if s.Mode != tc.mode || s.Scope != ScopeAll || s.Workspace != tc.workspace || s.Network != tc.network {
			t.Errorf("%s = mode %s scope %s workspace %s network %v, want mode %s scope all workspace %s network %v",
				tc.name, s.Mode, s.Scope, s.Workspace, s.Network, tc.mode, tc.workspace, tc.network)
		}
	}
}

func TestProfileCustom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Settings)
		want   string
	}{
		{"safe without network", func(s *Settings) { s.Network = false }, ProfileCustom},
		{"safe with a read-only workspace", func(s *Settings) { s.Workspace = WorkspaceRO }, ProfileCustom},
		{"safe scoped to code", func(s *Settings) { s.Scope = ScopeCode }, ProfileCustom},
		{"always with network", func(s *Settings) { s.Mode = ModeAlways }, ProfileCustom},
		{"tuned resources", func(s *Settings) { s.CPUs, s.MemoryBytes, s.Timeout = 2, 1<<30, time.Minute }, ProfileSafe},
		{"tuned threshold", func(s *Settings) { s.Threshold = 0.7 }, ProfileSafe},
		{"extra mounts", func(s *Settings) { s.Mounts = []ExtraMount{{Source: "/data", Target: "/data", ReadOnly: true}} }, ProfileSafe},
	} {
		s := mustProfile(t, ProfileSafe)
		tc.change(&s)
		if got := s.Profile(); got != tc.want {
			t.Errorf("%s: Profile() = %q, want %q", tc.name, got, tc.want)
		}
	}
	var zero Settings
	if got := zero.Profile(); got != ProfileCustom {
		t.Errorf("zero Settings: Profile() = %q, want custom", got)
	}
}

func TestProfileUnknown(t *testing.T) {
	for _, name := range []string{"", "Safe", "paranoid"} {
		_, err := ProfileSettings(name)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ProfileSettings(%q) = %v, want an invalid-argument error", name, err)
			continue
		}
		for _, want := range []string{"unknown profile", "off", "safe", "strict"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ProfileSettings(%q) error %q, want it to mention %q", name, err, want)
			}
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Settings)
		want   string
	}{
		{"mode", func(s *Settings) { s.Mode = "sometimes" }, "want off, auto or always"},
		{"scope", func(s *Settings) { s.Scope = "shell" }, "want code or all"},
		{"workspace", func(s *Settings) { s.Workspace = "rwx" }, "want none, ro or rw"},
		{"threshold", func(s *Settings) { s.Threshold = 1.5 }, "from 0 to 1"},
		{"NaN threshold", func(s *Settings) { s.Threshold = math.NaN() }, "from 0 to 1"},
		{"negative memory", func(s *Settings) { s.MemoryBytes = -1 }, "must not be negative"},
		{"mount", func(s *Settings) { s.Mounts = []ExtraMount{{Source: "/x"}} }, "source and a target"},
	} {
		s := mustProfile(t, ProfileSafe)
		tc.change(&s)
		err := s.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an invalid-argument error containing %q", tc.name, err, tc.want)
		}
		if _, err := Route(s, KindCommand, Assessment{}); err == nil {
			t.Errorf("%s: Route accepted invalid settings", tc.name)
		}
	}
}

func TestRoute(t *testing.T) {
	low := Score("ls -la")
	risky := Score("rm -rf build")
	for _, tc := range []struct {
		profile   string
		tune      func(*Settings)
		kind      Kind
		a         Assessment
		place     Place
		network   bool
		workspace WorkspaceAccess
		reason    string
	}{
		{ProfileOff, nil, KindCommand, risky, PlaceHost, true, WorkspaceRW, "everything runs on the host"},
		{ProfileOff, nil, KindCode, Assessment{}, PlaceHost, true, WorkspaceRW, "everything runs on the host"},
		{ProfileSafe, nil, KindCommand, low, PlaceFence, true, WorkspaceRW, "below the threshold 0.50"},
		{ProfileSafe, nil, KindCommand, risky, PlaceSandbox, true, WorkspaceRW, "deletes"},
		{ProfileSafe, nil, KindCommand, Assessment{Score: 0.5}, PlaceSandbox, true, WorkspaceRW, "at or above the threshold 0.50"},
		{ProfileSafe, nil, KindCommand, Assessment{Score: math.NaN()}, PlaceSandbox, true, WorkspaceRW, "risk 1.00"},
		{ProfileSafe, nil, KindCommand, Assessment{Score: -3}, PlaceSandbox, true, WorkspaceRW, "risk 1.00"},
		{ProfileSafe, nil, KindCode, Assessment{}, PlaceSandbox, true, WorkspaceRW, "code is never judged"},
		{ProfileSafe, func(s *Settings) { s.Threshold = 0.9 }, KindCommand, risky, PlaceFence, true, WorkspaceRW, "below the threshold 0.90"},
		{ProfileSafe, func(s *Settings) { s.Scope = ScopeCode }, KindCommand, risky, PlaceFence, true, WorkspaceRW, "custom profile: shell commands are out of scope"},
		{ProfileStrict, nil, KindCommand, low, PlaceSandbox, false, WorkspaceRO, "everything runs in a sandbox"},
		{ProfileStrict, nil, KindCode, Assessment{}, PlaceSandbox, false, WorkspaceRO, "everything runs in a sandbox"},
	} {
		s := mustProfile(t, tc.profile)
		if tc.tune != nil {
			tc.tune(&s)
		}
		d, err := Route(s, tc.kind, tc.a)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.profile, tc.kind, err)
		}
		if d.Place != tc.place || d.Network != tc.network || d.Workspace != tc.workspace || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s %s (score %v): got %s network %v workspace %s %q, want %s network %v workspace %s and a reason containing %q",
				tc.profile, tc.kind, tc.a.Score, d.Place, d.Network, d.Workspace, d.Reason, tc.place, tc.network, tc.workspace, tc.reason)
		}
	}
	if _, err := Route(mustProfile(t, ProfileSafe), "script", Assessment{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Route with kind script = %v, want an invalid-argument error", err)
	}
}

// TestMatrix: which mechanism governs each kind of caller under each profile.
func TestMatrix(t *testing.T) {
	want := map[string][5]string{ // run_code, shell, workflow step, verification, MCP server
		ProfileOff:    {"host", "host", "host", "host", "host"},
		ProfileSafe:   {"sandbox", "router", "router", "fence", "fence"},
		ProfileStrict: {"sandbox", "sandbox", "sandbox", "fence", "fence"},
	}
	callers := []string{CallerRunCode, CallerShell, CallerWorkflowStep, CallerVerification, CallerMCPServer}
	for name, mech := range want {
		s, err := ProfileSettings(name)
		if err != nil {
			t.Fatal(err)
		}
		rows := Matrix(s)
		if len(rows) != len(callers) {
			t.Fatalf("%s: %d rows, want %d", name, len(rows), len(callers))
		}
		for i, r := range rows {
			if r.Caller != callers[i] || r.Mechanism != mech[i] || r.Behaviour == "" {
				t.Errorf("%s, row %d: %+v; want %s governed by %s", name, i, r, callers[i], mech[i])
			}
		}
	}
	s, _ := ProfileSettings(ProfileSafe)
	s.Scope = ScopeCode
	if r := Matrix(s)[1]; r.Mechanism != "fence" {
		t.Errorf("commands out of scope: %+v; want the fence", r)
	}
}
