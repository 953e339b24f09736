package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func snapshotOf(usage int) Source {
	return func(ctx context.Context, perSandbox bool) (Snapshot, error) {
		s := Snapshot{Sandboxes: map[StateRuntime]int{{"running", "runc"}: 2, {"suspended", "runsc"}: 1}, AuditDropped: 7}
		for i := range usage {
			s.Usage = append(s.Usage, api.SandboxStats{ID: fmt.Sprintf("sb_%03d", i), Name: "n", CPU: api.CPUStats{UsageSeconds: 1}})
		}
		return s, nil
	}
}

// Counted work shows in its series, labelled by its fixed sets.
func TestCounters(t *testing.T) {
	s := New(snapshotOf(0), Options{})
	s.Operation("create", 2*time.Second, "")
	s.Operation("resume", time.Second, "unavailable")
	s.PoolClaim("warm", true)
	s.PoolClaim("warm", false)
	s.PoolClaim("warm", true)
	s.Egress("baseline", "deny", 0, 0)
	s.Egress("unrestricted", "allow", 100, 2000)
	var none *Set // counts nothing, and does not panic
	none.Operation("create", time.Second, "")
	none.Egress("baseline", "allow", 1, 1)
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(s.opsFailed.WithLabelValues("resume", "unavailable")), 1, "resume failures"},
		{testutil.ToFloat64(s.poolClaims.WithLabelValues("warm", "hit")), 2, "pool hits"},
		{testutil.ToFloat64(s.poolClaims.WithLabelValues("warm", "miss")), 1, "pool misses"},
		{testutil.ToFloat64(s.egress.WithLabelValues("baseline", "deny")), 1, "baseline denials"},
		{testutil.ToFloat64(s.proxyBytes.WithLabelValues("down")), 2000, "proxy bytes down"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v; want %v", c.what, c.got, c.want)
		}
	}
	want := `
# HELP airlock_sandboxes Sandboxes of this node that are not terminated, by state and runtime.
# TYPE airlock_sandboxes gauge
airlock_sandboxes{runtime="runc",state="running"} 2
airlock_sandboxes{runtime="runsc",state="suspended"} 1
# HELP airlock_audit_records_dropped_total Audit records (egress decisions, DNS queries) not stored because a sandbox went over its audit rate or queue.
# TYPE airlock_audit_records_dropped_total counter
airlock_audit_records_dropped_total 7
`
	if err := testutil.GatherAndCompare(s.Registry(), strings.NewReader(want), "airlock_sandboxes", "airlock_audit_records_dropped_total"); err != nil {
		t.Error(err)
	}
}

// Per-sandbox series are off by default, and capped when on.
func TestPerSandboxSeriesCapped(t *testing.T) {
	if n, err := testutil.GatherAndCount(New(snapshotOf(10), Options{}).Registry(), "airlock_sandbox_cpu_seconds_total"); err != nil || n != 0 {
		t.Errorf("off: %d series (%v); want none", n, err)
	}
	s := New(snapshotOf(10), Options{PerSandbox: true, MaxSandboxSeries: 4})
	if n, err := testutil.GatherAndCount(s.Registry(), "airlock_sandbox_cpu_seconds_total"); err != nil || n != 4 {
		t.Errorf("capped at 4: %d series (%v)", n, err)
	}
	want := `
# HELP airlock_sandbox_series_dropped Sampled sandboxes left out of the per-sandbox series (past metrics.max_sandbox_series).
# TYPE airlock_sandbox_series_dropped gauge
airlock_sandbox_series_dropped 6
`
	if err := testutil.GatherAndCompare(s.Registry(), strings.NewReader(want), "airlock_sandbox_series_dropped"); err != nil {
		t.Error(err)
	}
}
