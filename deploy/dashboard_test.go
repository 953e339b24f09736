package deploy

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/metrics"
	dto "github.com/prometheus/client_model/go"
)

// exported is every series name a node's /metrics can hold: a Set with per-sandbox
// series on, each instrument counted once, gathered; a histogram adds its _bucket, _sum
// and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	src := func(ctx context.Context, perSandbox bool) (metrics.Snapshot, error) {
		return metrics.Snapshot{Sandboxes: map[metrics.StateRuntime]int{{State: "running", Runtime: "runc"}: 1},
			Usage: []api.SandboxStats{{ID: "sb_x", Name: "x"}}}, nil
	}
	s := metrics.New(src, metrics.Options{PerSandbox: true, MaxSandboxSeries: 1})
	s.Operation("create", time.Second, "unavailable")
	s.Exec(time.Second)
	s.PoolClaim("p", true)
	s.Egress("baseline", "allow", 1, 1)
	families, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+suffix] = true
			}
		}
	}
	return names
}

// TestGrafanaDashboard: the example dashboard parses as a Grafana dashboard, and every
// series its queries name is one the daemon exports.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/airlock-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard has no title, uid or panels")
	}
	have := exported(t)
	series := regexp.MustCompile(`\b(airlock|go|process)_[a-z_]+`)
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	seen := 0
	for _, e := range exprs {
		for _, name := range series.FindAllString(e, -1) {
			seen++
			if !have[name] {
				t.Errorf("the dashboard queries %s (in %q), which the daemon does not export", name, e)
			}
		}
	}
	if seen == 0 || !strings.Contains(string(b), "airlock_sandboxes") {
		t.Errorf("the dashboard names no series of the daemon's")
	}
}
