package e2b_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/runtime"
)

// TestMetricsInE2BShape: a sandbox's samples answer GET /sandboxes/{id}/metrics as E2B's
// list of SandboxMetric, and the latest GET /sandboxes/metrics as E2B's map; another
// owner's sandbox is not found or left out, and a bad range is refused.
func TestMetricsInE2BShape(t *testing.T) {
	f, alice, bob := newFixtureConfig(t, func(c *manager.Config) { c.Usage.Interval = -1 })
	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base"}`)
	f.want("create", st, body, 201)
	var sb struct{ SandboxID string }
	json.Unmarshal(body, &sb)
	ctx := context.Background()
	for _, cpu := range []int64{1e9, 1e9 + 5e8} {
		f.node.Driver.SetStats(sb.SandboxID, runtime.Stats{CPUNanos: cpu, MemoryBytes: 100 << 20, MemoryLimit: 512 << 20, DiskUsed: 3 << 20, DiskLimit: 1 << 30})
		f.node.Manager.CollectUsage(ctx)
	}
	st, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", alice, "")
	f.want("metrics", st, body, 200)
	var list []map[string]any
	if err := json.Unmarshal(body, &list); err != nil || len(list) != 2 {
		t.Fatalf("metrics: %s (%v); want a list of 2 samples", body, err)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "diskUsed", "diskTotal"} {
		if _, ok := list[1][k]; !ok {
			t.Errorf("a sample lacks %s: %v", k, list[1])
		}
	}
	if list[1]["memUsed"] != float64(100<<20) || list[1]["memTotal"] != float64(512<<20) || list[1]["diskUsed"] != float64(3<<20) {
		t.Errorf("sample = %v; want memUsed 100 MiB of 512 MiB, diskUsed 3 MiB", list[1])
	}
	st, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", bob, "")
	f.want("bob's metrics of alice's sandbox", st, body, 404)
	st, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics?start=20&end=10", alice, "")
	f.want("start after end", st, body, 400)

	st, body, _ = f.do("GET", "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+",sb_nosuch", alice, "")
	f.want("many", st, body, 200)
	var many struct{ Sandboxes map[string]map[string]any }
	if err := json.Unmarshal(body, &many); err != nil || len(many.Sandboxes) != 1 || many.Sandboxes[sb.SandboxID] == nil {
		t.Fatalf("many: %s (%v); want alice's sandbox alone", body, err)
	}
	st, body, _ = f.do("GET", "/sandboxes/metrics?sandbox_ids="+sb.SandboxID, bob, "")
	f.want("bob's many", st, body, 200)
	if !strings.Contains(string(body), `"sandboxes":{}`) {
		t.Errorf("bob's many: %s; want none", body)
	}
	st, body, _ = f.do("GET", "/sandboxes/metrics", alice, "")
	f.want("many without ids", st, body, 400)
}
