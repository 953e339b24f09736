package e2b

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// sandboxMetric is E2B's SandboxMetric: one sample of a sandbox's usage. CPU is a
// share of the sandbox's cores (cpuCount, its limit rounded up), memory and disk are
// bytes against the sandbox's limits.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// maxMetricsIDs bounds the sandboxes one GET /sandboxes/metrics names.
const maxMetricsIDs = 100

func metricOf(sb *manager.Sandbox, st api.SandboxStats, at time.Time, cores float64, mem, disk int64) sandboxMetric {
	cpus := max(1, int(sb.Limits.CPU+0.999))
	return sandboxMetric{Timestamp: at.UTC(), TimestampUnix: at.Unix(), CPUCount: cpus,
		CPUUsedPct: float64(int(cores/float64(cpus)*10000+0.5)) / 100,
		MemUsed:    mem, MemTotal: st.Memory.LimitBytes, DiskUsed: disk, DiskTotal: st.Disk.LimitBytes}
}

// metrics answers GET /sandboxes/{id}/metrics: the samples the node keeps of the
// sandbox (its recent history, oldest first), within start and end (unix seconds)
// when given. A sandbox that is not running has none.
func (c *Control) metrics(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	start, end, err := metricsRange(r)
	if err != nil {
		return err
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	st, err := c.m.SandboxStats(r.Context(), p.Identity, sb.ID, true)
	if err != nil {
		return err
	}
	out := []sandboxMetric{}
	for _, s := range st.History {
		if (start != 0 && s.Time.Unix() < start) || (end != 0 && s.Time.Unix() > end) {
			continue
		}
		out = append(out, metricOf(sb, st, s.Time, s.CPUCores, s.MemoryBytes, s.DiskBytes))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metricsRange reads start and end (unix seconds; 0: open).
func metricsRange(r *http.Request) (start, end int64, err error) {
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		v    *int64
	}{{"start", &start}, {"end", &end}} {
		if s := q.Get(f.name); s != "" {
			if *f.v, err = strconv.ParseInt(s, 10, 64); err != nil || *f.v < 0 {
				return 0, 0, errdefs.Invalid("%s %q must be a unix time in seconds", f.name, s)
			}
		}
	}
	if start != 0 && end != 0 && start > end {
		return 0, 0, errdefs.Invalid("start %d is after end %d", start, end)
	}
	return start, end, nil
}

// manyMetrics answers GET /sandboxes/metrics?sandbox_ids=A,B: the latest sample of each
// named sandbox of the caller's that is running; others are left out, as E2B does.
func (c *Control) manyMetrics(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	raw := r.URL.Query().Get("sandbox_ids")
	if raw == "" {
		return errdefs.Invalid("sandbox_ids is required: a comma-separated list of sandbox ids")
	}
	ids := strings.Split(raw, ",")
	if len(ids) > maxMetricsIDs {
		return errdefs.Invalid("sandbox_ids names %d sandboxes; at most %d at once", len(ids), maxMetricsIDs)
	}
	out := map[string]sandboxMetric{}
	for _, id := range ids {
		if !strings.HasPrefix(id, "sb_") {
			continue
		}
		sb, err := c.m.Resolve(r.Context(), p.Identity, id)
		if err != nil || sb.State != manager.Running {
			continue
		}
		st, err := c.m.SandboxStats(r.Context(), p.Identity, sb.ID, false)
		if err != nil || st.State != string(manager.Running) {
			continue
		}
		out[sb.ID] = metricOf(sb, st, st.Time, st.CPU.Cores, st.Memory.UsedBytes, st.Disk.UsedBytes)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
	return nil
}
