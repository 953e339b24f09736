package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs /metrics with token ("": none) and returns the status and body.
func scrape(t *testing.T, addr, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /metrics answers 401 without a token and 403 to a role without metrics.read; with
// it, the text format parses and holds the node's series, counting what was done.
func TestMetricsEndpoint(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice"}})
	if code, body := scrape(t, n.Addr, ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s; want 401", code, body)
	}
	if code, body := scrape(t, n.Addr, n.Token(t, "alice")); code != http.StatusForbidden || !strings.Contains(body, "metrics.read") {
		t.Fatalf("a developer: %d %s; want 403 naming metrics.read", code, body)
	}
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	if _, err := alice.Create(bg, api.CreateSandboxRequest{Name: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Exec(bg, "m", api.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Auth.PutRole(bg, "monitor", []string{"metrics.read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Auth.CreateIdentity(bg, "prometheus", "service", []string{"monitor"}, nil); err != nil {
		t.Fatal(err)
	}
	tok, _, err := n.Auth.CreateToken(bg, "prometheus", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	code, body := scrape(t, n.Addr, tok)
	if code != http.StatusOK {
		t.Fatalf("a scraper with metrics.read: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		f := families[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"airlock_sandboxes", map[string]string{"state": "running"}, 1},
		{"airlock_operation_duration_seconds", map[string]string{"kind": "create", "result": "succeeded"}, 1},
		{"airlock_exec_duration_seconds", nil, 1},
		{"airlock_node_reserved_sandboxes", nil, 1},
		{"airlock_node_capacity_sandboxes", nil, 1},
		{"airlock_node_reserved_memory_bytes", nil, 1},
		{"airlock_audit_records_dropped_total", nil, 0},
		{"airlock_scrape_errors", nil, 0},
		{"go_goroutines", nil, 1},
	} {
		if v, ok := value(c.name, c.labels); !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v); want at least %v", c.name, c.labels, v, ok, c.min)
		}
	}
	if v, _ := value("airlock_scrape_errors", nil); v != 0 {
		t.Errorf("airlock_scrape_errors = %v; want 0", v)
	}
	for name := range families {
		if strings.HasPrefix(name, "airlock_sandbox_") {
			t.Errorf("per-sandbox series %s without metrics.per_sandbox", name)
		}
	}
}
