package manager

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router/decision"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

func TestRoute(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name    string
		def     RouterConfig
		req     RouteRequest
		place   decision.Place
		profile string
		ws      decision.WorkspaceAccess
		network bool
		score   float64 // at least
	}{
		{"no profile anywhere: scored, no place", RouterConfig{}, RouteRequest{Command: "rm -rf build"}, "", "", "", false, 0.5},
		{"the node's default", RouterConfig{Profile: "safe"}, RouteRequest{Command: "ls"}, decision.PlaceFence, "safe", decision.WorkspaceRW, true, 0},
		{"the request's profile wins", RouterConfig{Profile: "off"}, RouteRequest{Command: "ls", Profile: "strict"}, decision.PlaceSandbox, "strict", decision.WorkspaceRO, false, 0},
		{"risky under safe", RouterConfig{}, RouteRequest{Command: "rm -rf build", Profile: "safe"}, decision.PlaceSandbox, "safe", decision.WorkspaceRW, true, 0.5},
		{"argv is quoted, not run through a shell", RouterConfig{}, RouteRequest{Argv: []string{"echo", "a; rm -rf /"}, Profile: "safe"}, decision.PlaceFence, "safe", decision.WorkspaceRW, true, 0},
		{"a higher threshold lets it through", RouterConfig{Threshold: 0.9}, RouteRequest{Command: "rm -rf build", Profile: "safe"}, decision.PlaceFence, "safe", decision.WorkspaceRW, true, 0.5},
		{"off runs everything on the host", RouterConfig{}, RouteRequest{Command: "curl x | sh", Profile: "off"}, decision.PlaceHost, "off", decision.WorkspaceRW, true, 0.9},
		{"code is contained under safe", RouterConfig{}, RouteRequest{Kind: decision.KindCode, Language: "python", Profile: "safe"}, decision.PlaceSandbox, "safe", decision.WorkspaceRW, true, 0},
		{"code on the host under off", RouterConfig{}, RouteRequest{Kind: decision.KindCode, Language: "bash", Profile: "off"}, decision.PlaceHost, "off", decision.WorkspaceRW, true, 0},
		{"tuning makes it custom", RouterConfig{}, RouteRequest{Command: "ls", Profile: "safe", Workspace: decision.WorkspaceRO, Network: &no}, decision.PlaceFence, "custom", decision.WorkspaceRO, false, 0},
		{"unparseable text is held to be risky", RouterConfig{}, RouteRequest{Command: "echo 'unclosed", Profile: "safe"}, decision.PlaceSandbox, "safe", decision.WorkspaceRW, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{cfg: Config{Router: tc.def}}
			d, err := m.Route(context.Background(), Call{Owner: "o"}, tc.req)
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if d.Place != tc.place || d.Profile != tc.profile {
				t.Errorf("place %q profile %q (%s); want %q under %q", d.Place, d.Profile, d.Reason, tc.place, tc.profile)
			}
			if tc.place != "" && (d.Workspace != tc.ws || d.Network != tc.network) {
				t.Errorf("workspace %q network %v; want %q and %v", d.Workspace, d.Network, tc.ws, tc.network)
			}
			if d.Assessment.Score < tc.score {
				t.Errorf("score %v; want at least %v", d.Assessment.Score, tc.score)
			}
			if want := tc.def.Threshold; want != 0 && d.Threshold != want || want == 0 && d.Threshold != decision.DefaultThreshold {
				t.Errorf("threshold %v; want the node's (%v, 0 meaning the default)", d.Threshold, want)
			}
			if d.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

func TestRouteRefusesBadInput(t *testing.T) {
	m := &Manager{}
	for _, tc := range []struct {
		name string
		req  RouteRequest
	}{
		{"nothing to route", RouteRequest{Profile: "safe"}},
		{"both text and argv", RouteRequest{Command: "ls", Argv: []string{"ls"}, Profile: "safe"}},
		{"unknown profile", RouteRequest{Command: "ls", Profile: "paranoid"}},
		{"custom is not a profile to ask for", RouteRequest{Command: "ls", Profile: "custom"}},
		{"unknown kind", RouteRequest{Command: "ls", Kind: "script"}},
		{"unknown language", RouteRequest{Kind: decision.KindCode, Language: "cobol"}},
		{"code with text", RouteRequest{Kind: decision.KindCode, Language: "python", Command: "print(1)"}},
		{"a language for a command", RouteRequest{Command: "ls", Language: "python"}},
		{"unknown workspace access", RouteRequest{Command: "ls", Profile: "safe", Workspace: "all"}},
		{"argv that shell text cannot hold", RouteRequest{Argv: []string{"echo", "a\x00b"}, Profile: "safe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Route(context.Background(), Call{}, tc.req)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Route: %v; want invalid_argument", err)
			}
		})
	}
}

// TestConfigKnowsTheRoutersProfiles: the configuration, which imports no other
// package, names the router's profiles and default threshold itself.
func TestConfigKnowsTheRoutersProfiles(t *testing.T) {
	if !slices.Equal(config.RouterProfiles, decision.Profiles()) || config.DefaultRouterThreshold != decision.DefaultThreshold {
		t.Errorf("config has %v and %v, the router %v and %v", config.RouterProfiles, config.DefaultRouterThreshold,
			decision.Profiles(), decision.DefaultThreshold)
	}
}

// brokenRuntime is a driver whose health says it cannot run sandboxes.
type brokenRuntime struct{ runtime.Driver }

func (brokenRuntime) Health(context.Context) []runtime.Check {
	return []runtime.Check{{Name: "runc", OK: false, Degrades: "no sandbox can start"},
		{Name: "gvisor", OK: false, Optional: true, Degrades: "runsc cannot be used"}}
}

// TestRouteDegraded: with no working runtime, work the profile would contain runs on the
// host in the fence (marked degraded), or is refused with fail_closed; work the profile
// leaves on the host is unchanged, and the status says which state the router is in.
func TestRouteDegraded(t *testing.T) {
	broken := func(rc RouterConfig) *Manager {
		return &Manager{cfg: Config{Router: rc}, drivers: map[string]runtime.Driver{"runc": brokenRuntime{}}, defaultRuntime: "runc",
			log: slog.New(slog.DiscardHandler)}
	}
	ctx := context.Background()
	m := broken(RouterConfig{Profile: "safe"})
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chain, err := audit.OpenChain(ctx, st, []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	m.auditLog = chain
	d, err := m.Route(ctx, Call{Owner: "o"}, RouteRequest{Command: "rm -rf build"})
	if err != nil || d.Place != decision.PlaceFence || !d.Degraded || !strings.Contains(d.Reason, "degraded") || !strings.Contains(d.Reason, "no sandbox can start") {
		t.Errorf("a risky command, no runtime: %+v, %v; want the fence, degraded, saying why", d, err)
	}
	if d.Network != true || d.Workspace != decision.WorkspaceRW {
		t.Errorf("degraded under safe: network %v workspace %q; want the profile's", d.Network, d.Workspace)
	}
	recs, err := chain.List(ctx, store.AuditFilter{})
	if err != nil || len(recs) != 1 || recs[0].Action != "sandbox.degraded" || recs[0].Identity != "o" || !strings.Contains(string(recs[0].Doc), "rm -rf build") {
		t.Errorf("audit log after a degraded route: %v, %+v; want one sandbox.degraded record of o naming the command", err, recs)
	}
	d, err = m.Route(ctx, Call{Owner: "o"}, RouteRequest{Command: "rm -rf build", Profile: "strict"})
	if err != nil || d.Place != decision.PlaceFence || !d.Degraded || d.Network {
		t.Errorf("strict, no runtime: %+v, %v; want the fence without network", d, err)
	}
	d, err = m.Route(ctx, Call{Owner: "o"}, RouteRequest{Command: "ls"})
	if err != nil || d.Place != decision.PlaceFence || d.Degraded {
		t.Errorf("a harmless command, no runtime: %+v, %v; want the fence, not degraded", d, err)
	}
	if st := m.RouterStatus(ctx); st.State != RouterDegraded || !strings.Contains(st.Reason, "no sandbox can start") || len(st.Matrix) != 5 {
		t.Errorf("status: %+v; want degraded with the reason and a matrix", st)
	}

	closed := broken(RouterConfig{Profile: "safe", FailClosed: true})
	if _, err := closed.Route(ctx, Call{Owner: "o"}, RouteRequest{Kind: decision.KindCode, Language: "python"}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "fail_closed") {
		t.Errorf("code with fail_closed and no runtime: %v; want it refused as unavailable, naming fail_closed", err)
	}
	if d, err := closed.Route(ctx, Call{Owner: "o"}, RouteRequest{Command: "ls"}); err != nil || d.Place != decision.PlaceFence {
		t.Errorf("a harmless command with fail_closed: %+v, %v; want the fence", d, err)
	}

	for _, tc := range []struct {
		m    *Manager
		want RouterState
	}{
		{&Manager{cfg: Config{Router: RouterConfig{Profile: "safe"}}}, RouterLive},
		{broken(RouterConfig{Profile: "off"}), RouterOff},
		{broken(RouterConfig{}), RouterOff},
	} {
		if st := tc.m.RouterStatus(ctx); st.State != tc.want || st.Reason == "" {
			t.Errorf("status under %q: %+v; want %s", tc.m.cfg.Router.Profile, st, tc.want)
		}
	}
}
