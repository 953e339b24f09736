package manager

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router"
)

func TestRoute(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name    string
		def     RouterConfig
		req     RouteRequest
		place   router.Place
		profile string
		ws      router.WorkspaceAccess
		network bool
		score   float64 // at least
	}{
		{"no profile anywhere: scored, no place", RouterConfig{}, RouteRequest{Command: "rm -rf build"}, "", "", "", false, 0.5},
		{"the node's default", RouterConfig{Profile: "safe"}, RouteRequest{Command: "ls"}, router.PlaceFence, "safe", router.WorkspaceRW, true, 0},
		{"the request's profile wins", RouterConfig{Profile: "off"}, RouteRequest{Command: "ls", Profile: "strict"}, router.PlaceSandbox, "strict", router.WorkspaceRO, false, 0},
		{"risky under safe", RouterConfig{}, RouteRequest{Command: "rm -rf build", Profile: "safe"}, router.PlaceSandbox, "safe", router.WorkspaceRW, true, 0.5},
		{"argv is quoted, not run through a shell", RouterConfig{}, RouteRequest{Argv: []string{"echo", "a; rm -rf /"}, Profile: "safe"}, router.PlaceFence, "safe", router.WorkspaceRW, true, 0},
		{"a higher threshold lets it through", RouterConfig{Threshold: 0.9}, RouteRequest{Command: "rm -rf build", Profile: "safe"}, router.PlaceFence, "safe", router.WorkspaceRW, true, 0.5},
		{"off runs everything on the host", RouterConfig{}, RouteRequest{Command: "curl x | sh", Profile: "off"}, router.PlaceHost, "off", router.WorkspaceRW, true, 0.9},
		{"code is contained under safe", RouterConfig{}, RouteRequest{Kind: router.KindCode, Language: "python", Profile: "safe"}, router.PlaceSandbox, "safe", router.WorkspaceRW, true, 0},
		{"code on the host under off", RouterConfig{}, RouteRequest{Kind: router.KindCode, Language: "bash", Profile: "off"}, router.PlaceHost, "off", router.WorkspaceRW, true, 0},
		{"tuning makes it custom", RouterConfig{}, RouteRequest{Command: "ls", Profile: "safe", Workspace: router.WorkspaceRO, Network: &no}, router.PlaceFence, "custom", router.WorkspaceRO, false, 0},
		{"unparseable text is held to be risky", RouterConfig{}, RouteRequest{Command: "echo 'unclosed", Profile: "safe"}, router.PlaceSandbox, "safe", router.WorkspaceRW, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{cfg: Config{Router: tc.def}}
			d, err := m.Route(Call{Owner: "o"}, tc.req)
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
			if want := tc.def.Threshold; want != 0 && d.Threshold != want || want == 0 && d.Threshold != router.DefaultThreshold {
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
		{"unknown language", RouteRequest{Kind: router.KindCode, Language: "cobol"}},
		{"code with text", RouteRequest{Kind: router.KindCode, Language: "python", Command: "print(1)"}},
		{"a language for a command", RouteRequest{Command: "ls", Language: "python"}},
		{"unknown workspace access", RouteRequest{Command: "ls", Profile: "safe", Workspace: "all"}},
		{"argv that shell text cannot hold", RouteRequest{Argv: []string{"echo", "a\x00b"}, Profile: "safe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Route(Call{}, tc.req)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Route: %v; want invalid_argument", err)
			}
		})
	}
}

// TestConfigKnowsTheRoutersProfiles: the configuration, which imports no other
// package, names the router's profiles and default threshold itself.
func TestConfigKnowsTheRoutersProfiles(t *testing.T) {
	if !slices.Equal(config.RouterProfiles, router.Profiles()) || config.DefaultRouterThreshold != router.DefaultThreshold {
		t.Errorf("config has %v and %v, the router %v and %v", config.RouterProfiles, config.DefaultRouterThreshold,
			router.Profiles(), router.DefaultThreshold)
	}
}
