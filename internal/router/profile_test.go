package router

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router/decision"
)

func mustProfile(t *testing.T, name string) decision.Settings {
	t.Helper()
	s, err := decision.ProfileSettings(name)
	if err != nil {
		t.Fatalf("ProfileSettings(%q): %v", name, err)
	}
	return s
}

func TestProfileRoundTrip(t *testing.T) {
	for _, name := range decision.Profiles() {
		s := mustProfile(t, name)
		if got := s.Profile(); got != name {
			t.Errorf("ProfileSettings(%q).Profile() = %q, want %q", name, got, name)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("profile %s does not validate: %v", name, err)
		}
	}
	if got, want := strings.Join(decision.Profiles(), ","), "off,safe,strict"; got != want {
		t.Errorf("Profiles() = %s, want %s", got, want)
	}
}

func TestProfileFields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      decision.Mode
		workspace decision.WorkspaceAccess
		network   bool
	}{
		{decision.ProfileOff, decision.ModeOff, decision.WorkspaceRW, true},
		{decision.ProfileSafe, decision.ModeAuto, decision.WorkspaceRW, true},
		{decision.ProfileStrict, decision.ModeAlways, decision.WorkspaceRO, false},
	} {
		s := mustProfile(t, tc.name)
		if s.Mode != tc.mode || s.Scope != decision.ScopeAll || s.Workspace != tc.workspace || s.Network != tc.network {
			t.Errorf("%s = mode %s scope %s workspace %s network %v, want mode %s scope all workspace %s network %v",
				tc.name, s.Mode, s.Scope, s.Workspace, s.Network, tc.mode, tc.workspace, tc.network)
		}
	}
}

func TestProfileCustom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*decision.Settings)
		want   string
	}{
		{"safe without network", func(s *decision.Settings) { s.Network = false }, decision.ProfileCustom},
		{"safe with a read-only workspace", func(s *decision.Settings) { s.Workspace = decision.WorkspaceRO }, decision.ProfileCustom},
		{"safe scoped to code", func(s *decision.Settings) { s.Scope = decision.ScopeCode }, decision.ProfileCustom},
		{"always with network", func(s *decision.Settings) { s.Mode = decision.ModeAlways }, decision.ProfileCustom},
		{"tuned resources", func(s *decision.Settings) { s.CPUs, s.MemoryBytes, s.Timeout = 2, 1<<30, time.Minute }, decision.ProfileSafe},
		{"tuned threshold", func(s *decision.Settings) { s.Threshold = 0.7 }, decision.ProfileSafe},
		{"extra mounts", func(s *decision.Settings) {
			s.Mounts = []decision.ExtraMount{{Source: "/data", Target: "/data", ReadOnly: true}}
		}, decision.ProfileSafe},
	} {
		s := mustProfile(t, decision.ProfileSafe)
		tc.change(&s)
		if got := s.Profile(); got != tc.want {
			t.Errorf("%s: Profile() = %q, want %q", tc.name, got, tc.want)
		}
	}
	var zero decision.Settings
	if got := zero.Profile(); got != decision.ProfileCustom {
		t.Errorf("zero Settings: Profile() = %q, want custom", got)
	}
}

func TestProfileUnknown(t *testing.T) {
	for _, name := range []string{"", "Safe", "paranoid"} {
		_, err := decision.ProfileSettings(name)
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
		change func(*decision.Settings)
		want   string
	}{
		{"mode", func(s *decision.Settings) { s.Mode = "sometimes" }, "want off, auto or always"},
		{"scope", func(s *decision.Settings) { s.Scope = "shell" }, "want code or all"},
		{"workspace", func(s *decision.Settings) { s.Workspace = "rwx" }, "want none, ro or rw"},
		{"threshold", func(s *decision.Settings) { s.Threshold = 1.5 }, "from 0 to 1"},
		{"NaN threshold", func(s *decision.Settings) { s.Threshold = math.NaN() }, "from 0 to 1"},
		{"negative memory", func(s *decision.Settings) { s.MemoryBytes = -1 }, "must not be negative"},
		{"mount", func(s *decision.Settings) { s.Mounts = []decision.ExtraMount{{Source: "/x"}} }, "source and a target"},
	} {
		s := mustProfile(t, decision.ProfileSafe)
		tc.change(&s)
		err := s.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an invalid-argument error containing %q", tc.name, err, tc.want)
		}
		if _, err := Route(s, decision.KindCommand, Assessment{}); err == nil {
			t.Errorf("%s: Route accepted invalid settings", tc.name)
		}
	}
}

func TestRoute(t *testing.T) {
	low := Score("ls -la")
	risky := Score("rm -rf build")
	for _, tc := range []struct {
		profile   string
		tune      func(*decision.Settings)
		kind      decision.Kind
		a         Assessment
		place     decision.Place
		network   bool
		workspace decision.WorkspaceAccess
		reason    string
	}{
		{decision.ProfileOff, nil, decision.KindCommand, risky, decision.PlaceHost, true, decision.WorkspaceRW, "everything runs on the host"},
		{decision.ProfileOff, nil, decision.KindCode, Assessment{}, decision.PlaceHost, true, decision.WorkspaceRW, "everything runs on the host"},
		{decision.ProfileSafe, nil, decision.KindCommand, low, decision.PlaceFence, true, decision.WorkspaceRW, "below the threshold 0.50"},
		{decision.ProfileSafe, nil, decision.KindCommand, risky, decision.PlaceSandbox, true, decision.WorkspaceRW, "deletes"},
		{decision.ProfileSafe, nil, decision.KindCommand, Assessment{Score: 0.5}, decision.PlaceSandbox, true, decision.WorkspaceRW, "at or above the threshold 0.50"},
		{decision.ProfileSafe, nil, decision.KindCommand, Assessment{Score: math.NaN()}, decision.PlaceSandbox, true, decision.WorkspaceRW, "risk 1.00"},
		{decision.ProfileSafe, nil, decision.KindCommand, Assessment{Score: -3}, decision.PlaceSandbox, true, decision.WorkspaceRW, "risk 1.00"},
		{decision.ProfileSafe, nil, decision.KindCode, Assessment{}, decision.PlaceSandbox, true, decision.WorkspaceRW, "code is never judged"},
		{decision.ProfileSafe, func(s *decision.Settings) { s.Threshold = 0.9 }, decision.KindCommand, risky, decision.PlaceFence, true, decision.WorkspaceRW, "below the threshold 0.90"},
		{decision.ProfileSafe, func(s *decision.Settings) { s.Scope = decision.ScopeCode }, decision.KindCommand, risky, decision.PlaceFence, true, decision.WorkspaceRW, "custom profile: shell commands are out of scope"},
		{decision.ProfileStrict, nil, decision.KindCommand, low, decision.PlaceSandbox, false, decision.WorkspaceRO, "everything runs in a sandbox"},
		{decision.ProfileStrict, nil, decision.KindCode, Assessment{}, decision.PlaceSandbox, false, decision.WorkspaceRO, "everything runs in a sandbox"},
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
	if _, err := Route(mustProfile(t, decision.ProfileSafe), "script", Assessment{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Route with kind script = %v, want an invalid-argument error", err)
	}
}

// TestMatrix: which mechanism governs each kind of caller under each profile.
func TestMatrix(t *testing.T) {
	want := map[string][5]string{ // run_code, shell, workflow step, verification, MCP server
		decision.ProfileOff:    {"host", "host", "host", "host", "host"},
		decision.ProfileSafe:   {"sandbox", "router", "router", "fence", "fence"},
		decision.ProfileStrict: {"sandbox", "sandbox", "sandbox", "fence", "fence"},
	}
	callers := []string{CallerRunCode, CallerShell, CallerWorkflowStep, CallerVerification, CallerMCPServer}
	for name, mech := range want {
		s, err := decision.ProfileSettings(name)
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
	s, _ := decision.ProfileSettings(decision.ProfileSafe)
	s.Scope = decision.ScopeCode
	if r := Matrix(s)[1]; r.Mechanism != "fence" {
		t.Errorf("commands out of scope: %+v; want the fence", r)
	}
}
