package manager

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// The collector turns two readings of a cgroup's CPU time into cores used, keeps the
// latest reading with its limits, answers zeros once the sandbox is suspended and frees
// its ring then; another owner cannot read it.
func TestUsageFromReadings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Usage = UsageConfig{Interval: -1} // sampled by the test, not by a ticker
	fd := newFake(t)
	m, _ := newManagerWith(t, cfg, fd)
	m.usage = newUsageBook(UsageConfig{Interval: time.Hour, History: 4})
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	m.SetClock(func() time.Time { return clock })
	base := runtime.Stats{MemoryBytes: 300 << 20, MemoryLimit: 1 << 30, MemoryPeak: 400 << 20, PIDs: 7, PIDsLimit: 1024,
		CPULimit: 2, DiskUsed: 5 << 20, DiskLimit: 10 << 30, Connections: 3}
	for i, cpu := range []int64{10e9, 11.5e9, 13e9} { // 1.5 s of CPU every second: 1.5 cores
		st := base
		st.CPUNanos = cpu
		fd.SetStats(sb.ID, st)
		m.CollectUsage(ctx)
		if i < 2 {
			clock = clock.Add(time.Second)
		}
	}
	got, err := m.SandboxStats(ctx, "local", "a", true)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU.Cores != 1.5 || got.CPU.UsageSeconds != 13 || got.CPU.LimitCores != 2 {
		t.Errorf("cpu = %+v; want 1.5 cores, 13 s used, limit 2", got.CPU)
	}
	if got.Memory.UsedBytes != 300<<20 || got.Memory.LimitBytes != 1<<30 || got.Memory.PeakBytes != 400<<20 {
		t.Errorf("memory = %+v", got.Memory)
	}
	if got.PIDs.Current != 7 || got.PIDs.Limit != 1024 || got.Disk.UsedBytes != 5<<20 || got.Network.Connections != 3 {
		t.Errorf("pids %+v disk %+v network %+v", got.PIDs, got.Disk, got.Network)
	}
	if len(got.History) != 3 || got.History[0].CPUCores != 0 || got.History[2].CPUCores != 1.5 || !got.History[0].Time.Before(got.History[2].Time) {
		t.Errorf("history = %+v; want 3 samples, oldest first, the last at 1.5 cores", got.History)
	}
	if _, err := m.SandboxStats(ctx, "bob", "a", false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob reads local's sandbox by name: %v; want not found", err)
	}
	if _, err := m.SandboxStats(ctx, "bob", sb.ID, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob reads local's sandbox by id: %v; want not found", err)
	}
	if all, _ := m.AllStats(ctx, "bob", nil); len(all) != 0 {
		t.Errorf("bob's stats list %d sandboxes; want none", len(all))
	}

	if _, _, err := m.Suspend(ctx, local, "a"); err != nil {
		t.Fatal(err)
	}
	got, _ = m.SandboxStats(ctx, "local", "a", true)
	if got.State != string(Suspended) || got.CPU.UsageSeconds != 0 || got.Memory.UsedBytes != 0 || len(got.History) != 0 {
		t.Errorf("suspended: %+v; want its state and zeros", got)
	}
	m.CollectUsage(ctx)
	if m.usage.rings != 0 || len(m.usage.byID) != 0 {
		t.Errorf("after a suspend the book holds %d rings, %d entries; want none", m.usage.rings, len(m.usage.byID))
	}
}

// Each ring holds History samples, and the rings together at most Budget: sandboxes
// past it keep their latest reading but no history.
func TestUsageHistoryBounded(t *testing.T) {
	b := newUsageBook(UsageConfig{Interval: time.Second, History: 5, Budget: 10})
	now := time.Unix(0, 0)
	for i := range 3 {
		sb := &store.Sandbox{ID: "sb_" + string(rune('a'+i)), State: Running}
		for range 12 {
			now = now.Add(time.Second)
			b.record(sb, runtime.Stats{MemoryBytes: now.Unix()}, netattach.Traffic{}, now)
		}
	}
	for id, want := range map[string]int{"sb_a": 5, "sb_b": 5, "sb_c": 0} {
		got, ok := b.get(id, true)
		if !ok || len(got.History) != want {
			t.Errorf("%s: %d samples (ok %v); want %d", id, len(got.History), ok, want)
		}
		if want > 0 && got.History[want-1].MemoryBytes != got.Memory.UsedBytes {
			t.Errorf("%s: newest sample %d; want the latest reading %d", id, got.History[want-1].MemoryBytes, got.Memory.UsedBytes)
		}
	}
	if b.rings != 2 {
		t.Errorf("%d rings; want 2 (budget 10 / 5)", b.rings)
	}
	b.keep(map[string]bool{"sb_c": true})
	if b.rings != 0 || len(b.byID) != 1 {
		t.Errorf("after keep: %d rings, %d entries; want 0 and 1", b.rings, len(b.byID))
	}
}

// The manager counts its work into the node's metrics: a pool claim, an egress
// decision and its bytes, an exec, finished operations by kind.
func TestMetricsCounted(t *testing.T) {
	m, _, _ := newTestManager(t)
	set := metrics.New(m.MetricsSnapshot, metrics.Options{})
	m.SetMetrics(set)
	ctx := context.Background()
	fillPool(t, m, "warm", 1)
	if _, _, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, "alice", "a", ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	m.EgressAudit(egress.Record{Sandbox: "sb_x", Mode: "baseline", Decision: "deny"})
	m.EgressAudit(egress.Record{Sandbox: "sb_x", Mode: "unrestricted", Decision: "allow", Allowed: true, BytesUp: 10, BytesDown: 700})
	got := map[string]float64{}
	families, err := set.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, mt := range f.Metric {
			key := f.GetName()
			for _, l := range mt.Label {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				got[key] = mt.Counter.GetValue()
			case mt.Histogram != nil:
				got[key] = float64(mt.Histogram.GetSampleCount())
			case mt.Gauge != nil:
				got[key] = mt.Gauge.GetValue()
			}
		}
	}
	for key, want := range map[string]float64{
		"airlock_pool_claims_total,pool=warm,result=hit":                  1,
		"airlock_egress_decisions_total,mode=baseline,verdict=deny":       1,
		"airlock_egress_decisions_total,mode=unrestricted,verdict=allow":  1,
		"airlock_egress_proxy_bytes_total,direction=down":                 700,
		"airlock_exec_duration_seconds":                                   1,
		"airlock_operation_duration_seconds,kind=create,result=succeeded": 1,
		"airlock_sandboxes,runtime=runc,state=running":                    1, // the claimed member
	} {
		if got[key] != want {
			t.Errorf("%s = %v; want %v", key, got[key], want)
		}
	}
}
