package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
	"golang.org/x/sys/unix"
)

// constStats is a driver whose every sandbox reads the same: what the manager pays
// per tick on its own (the store's list, the book), apart from the host's files (see
// oci's BenchmarkStats and sandboxlink's BenchmarkCounters).
type constStats struct{ runtime.Driver }

func (constStats) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{MemoryBytes: 64 << 20, CPUNanos: 1e9, PIDs: 3, DiskUsed: 1 << 20}, nil
}

// benchNode is a manager (not started: no loop touches the records) over a store with
// n running sandboxes of this node.
func benchNode(b *testing.B, n int) *Manager {
	cfg := DefaultConfig()
	cfg.Usage.Interval = -1
	m, st := newManagerWith(b, cfg, constStats{newFake(b)})
	ctx := context.Background()
	at := time.Now().Add(-time.Hour)
	for i := range n {
		sb := &store.Sandbox{ID: fmt.Sprintf("sb_bench%012d", i), Name: fmt.Sprintf("s%d", i), Owner: "local", State: Running,
			Limits: store.Limits{CPU: 1, Memory: 1 << 30, PIDs: 1024, Disk: 10 << 30}, CreatedAt: at, UpdatedAt: at, LastActivity: at,
			ImageDigest: "sha256:bench", UIDBase: uint32(1<<20 + i*65536)}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

func cpuNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCollectUsage1000 is one collector tick over 1,000 running sandboxes, the
// driver's reads aside.
func BenchmarkCollectUsage1000(b *testing.B) {
	m := benchNode(b, 1000)
	ctx := context.Background()
	m.CollectUsage(ctx)
	if len(m.usage.byID) != 1000 {
		b.Fatalf("%d sampled; want 1000", len(m.usage.byID))
	}
	cpu0 := cpuNow()
	for b.Loop() {
		m.CollectUsage(ctx)
	}
	b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkScrape1000 is one GET /metrics of a node with 1,000 running sandboxes, each
// sampled, with per-sandbox series on for all of them (the most a scrape can hold at
// that count); it reports the answer's bytes.
func BenchmarkScrape1000(b *testing.B) {
	m := benchNode(b, 1000)
	m.CollectUsage(context.Background())
	for _, per := range []bool{false, true} {
		b.Run(fmt.Sprintf("per_sandbox=%v", per), func(b *testing.B) {
			h := metrics.New(m.MetricsSnapshot, metrics.Options{PerSandbox: per, MaxSandboxSeries: 1000}).Handler()
			var size int
			cpu0 := cpuNow()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				if rec.Code != 200 {
					b.Fatalf("scrape: %d", rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes")
			b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkReserveLive1000 is the live-cap check of one create by an owner with 1,000
// running sandboxes and a cap above them, as on a dense node.
func BenchmarkReserveLive1000(b *testing.B) {
	m := benchNode(b, 1000)
	m.cfg.LiveCap = 5000
	ctx := context.Background()
	cpu0 := cpuNow()
	for b.Loop() {
		release, err := m.reserveLive(ctx, "local", "sb_new")
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
	b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
