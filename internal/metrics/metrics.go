// Package metrics owns the node's Prometheus exposition: every series' name, help,
// labels and buckets, the instruments the manager counts into as work happens, and the
// collector that reads what is cheaper to read at scrape time (sandboxes by state,
// capacity and reservations, per-sandbox usage) from a Source. Names follow the
// Prometheus conventions: airlock_ prefix, base units (_seconds, _bytes), _total for
// counters.
//
// It must not import the manager, the store or the runtime, and must not touch the host:
// what it exports comes from its Source and its own instruments. Its labels take values
// from fixed sets (operation kinds, states, modes, verdicts) or from names the node's
// administrators choose (pools, runtimes); sandbox ids and names appear only in the
// per-sandbox series, which are off unless configured and capped in number.
package metrics

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is what a scrape reads from the node.
type Snapshot struct {
	// Sandboxes counts the node's sandboxes that are not terminated, by state and
	// runtime.
	Sandboxes map[StateRuntime]int
	// Capacity and Reserved are the node's size and what its sandboxes' limits reserve
	// (zero capacity: not known).
	CapacityMemory, ReservedMemory int64
	CapacityCPUs, ReservedCPUs     float64
	CapacitySandboxes              int
	ReservedSandboxes              int
	// AuditDropped counts audit records not stored since the daemon started.
	AuditDropped int64
	// Usage is every sampled sandbox's latest reading (only when per-sandbox series are
	// on).
	Usage []api.SandboxStats
}

// StateRuntime is a label pair of airlock_sandboxes.
type StateRuntime struct{ State, Runtime string }

// Source reads a Snapshot; perSandbox says whether Usage is wanted.
type Source func(ctx context.Context, perSandbox bool) (Snapshot, error)

// Options configure a Set.
type Options struct {
	// PerSandbox adds series per sandbox, for at most MaxSandboxSeries sandboxes (those
	// first by id); airlock_sandbox_series_dropped counts the others.
	PerSandbox       bool
	MaxSandboxSeries int
}

// Set is the node's instruments and registry. A nil *Set counts nothing.
type Set struct {
	reg  *prometheus.Registry
	opts Options

	opSeconds   *prometheus.HistogramVec
	opsFailed   *prometheus.CounterVec
	execSeconds prometheus.Histogram
	poolClaims  *prometheus.CounterVec
	egress      *prometheus.CounterVec
	proxyBytes  *prometheus.CounterVec
}

// New builds a Set whose scrapes read src.
func New(src Source, opts Options) *Set {
	s := &Set{reg: prometheus.NewRegistry(), opts: opts,
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "airlock_operation_duration_seconds",
			Help:    "How long sandbox operations took, from request to outcome, by kind (create, resume, fork, terminate, suspend, snapshot, restore, ...) and result.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"kind", "result"}),
		opsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_operations_failed_total",
			Help: "Sandbox operations that failed, by kind and error code."}, []string{"kind", "code"}),
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "airlock_exec_duration_seconds",
			Help:    "How long execs took, from request to exit (a suspended sandbox's resume included).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}),
		poolClaims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_pool_claims_total",
			Help: "Creates that asked a warm pool for a member, by pool and result (hit: a ready member was claimed; miss: none was)."}, []string{"pool", "result"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_egress_decisions_total",
			Help: "Egress proxy decisions, by the sandbox's egress mode and verdict (allow, deny, error)."}, []string{"mode", "verdict"}),
		proxyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_egress_proxy_bytes_total",
			Help: "Bytes the egress proxy carried for sandboxes, by direction (up: to the destination; down: back to the sandbox)."}, []string{"direction"}),
	}
	s.reg.MustRegister(s.opSeconds, s.opsFailed, s.execSeconds, s.poolClaims, s.egress, s.proxyBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&scrape{src: src, opts: opts})
	return s
}

// Handler serves the registry in the Prometheus text (or negotiated) format.
func (s *Set) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is the Set's registry (tests gather it).
func (s *Set) Registry() *prometheus.Registry { return s.reg }

// Operation counts one finished operation of kind that took d; code is its error code
// ("" when it succeeded).
func (s *Set) Operation(kind string, d time.Duration, code string) {
	if s == nil {
		return
	}
	result := "succeeded"
	if code != "" {
		result = "failed"
		s.opsFailed.WithLabelValues(kind, code).Inc()
	}
	s.opSeconds.WithLabelValues(kind, result).Observe(max(d, 0).Seconds())
}

// Exec counts one exec that took d.
func (s *Set) Exec(d time.Duration) {
	if s != nil {
		s.execSeconds.Observe(max(d, 0).Seconds())
	}
}

// PoolClaim counts a create's look for a ready member of pool.
func (s *Set) PoolClaim(pool string, hit bool) {
	if s == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	s.poolClaims.WithLabelValues(pool, result).Inc()
}

// Egress counts one egress decision and the bytes it carried.
func (s *Set) Egress(mode, verdict string, up, down int64) {
	if s == nil {
		return
	}
	if mode == "" {
		mode = "unknown" // the connection came from no known sandbox
	}
	s.egress.WithLabelValues(mode, verdict).Inc()
	if up > 0 {
		s.proxyBytes.WithLabelValues("up").Add(float64(up))
	}
	if down > 0 {
		s.proxyBytes.WithLabelValues("down").Add(float64(down))
	}
}

// scrape is the collector of what is read at scrape time.
type scrape struct {
	src  Source
	opts Options
}

var (
	descSandboxes = prometheus.NewDesc("airlock_sandboxes", "Sandboxes of this node that are not terminated, by state and runtime.", []string{"state", "runtime"}, nil)
	descCapMem    = prometheus.NewDesc("airlock_node_capacity_memory_bytes", "Memory this node's sandboxes may reserve between them (0: not checked).", nil, nil)
	descResMem    = prometheus.NewDesc("airlock_node_reserved_memory_bytes", "Memory the limits of this node's sandboxes reserve.", nil, nil)
	descCapCPU    = prometheus.NewDesc("airlock_node_capacity_cpus", "The host's CPU cores.", nil, nil)
	descResCPU    = prometheus.NewDesc("airlock_node_reserved_cpus", "Cores the limits of this node's sandboxes reserve.", nil, nil)
	descCapSb     = prometheus.NewDesc("airlock_node_capacity_sandboxes", "How many sandboxes the node can hold at all (its uid ranges).", nil, nil)
	descResSb     = prometheus.NewDesc("airlock_node_reserved_sandboxes", "Sandboxes of this node whose container exists or is being made.", nil, nil)
	descDropped   = prometheus.NewDesc("airlock_audit_records_dropped_total", "Audit records (egress decisions, DNS queries) not stored because a sandbox went over its audit rate or queue.", nil, nil)
	descScrapeErr = prometheus.NewDesc("airlock_scrape_errors", "1 when this scrape could not read the node's records (the series read from them are missing).", nil, nil)

	descSbDropped = prometheus.NewDesc("airlock_sandbox_series_dropped", "Sampled sandboxes left out of the per-sandbox series (past metrics.max_sandbox_series).", nil, nil)
)

// sandboxSeries is one per-sandbox series: labelled by the sandbox's id and name, its
// value read from the sandbox's latest usage.
type sandboxSeries struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(api.SandboxStats) float64
}

func perSandboxSeries(name, help string, kind prometheus.ValueType, value func(api.SandboxStats) float64) sandboxSeries {
	return sandboxSeries{prometheus.NewDesc(name, help, []string{"sandbox", "name"}, nil), kind, value}
}

var sandboxSeriesList = []sandboxSeries{
	perSandboxSeries("airlock_sandbox_cpu_seconds_total", "CPU time the sandbox's container used.", prometheus.CounterValue,
		func(u api.SandboxStats) float64 { return u.CPU.UsageSeconds }),
	perSandboxSeries("airlock_sandbox_cpu_cores", "Cores the sandbox used over the last sampling interval.", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return u.CPU.Cores }),
	perSandboxSeries("airlock_sandbox_memory_bytes", "Memory the sandbox uses (less the inactive file cache).", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return float64(u.Memory.UsedBytes) }),
	perSandboxSeries("airlock_sandbox_memory_limit_bytes", "The sandbox's memory limit.", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return float64(u.Memory.LimitBytes) }),
	perSandboxSeries("airlock_sandbox_disk_used_bytes", "Bytes used on the sandbox's disk.", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return float64(u.Disk.UsedBytes) }),
	perSandboxSeries("airlock_sandbox_pids", "Processes and threads in the sandbox.", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return float64(u.PIDs.Current) }),
	perSandboxSeries("airlock_sandbox_network_receive_bytes_total", "Bytes the sandbox received, counted on the host side of its link.", prometheus.CounterValue,
		func(u api.SandboxStats) float64 { return float64(u.Network.RxBytes) }),
	perSandboxSeries("airlock_sandbox_network_transmit_bytes_total", "Bytes the sandbox sent, counted on the host side of its link.", prometheus.CounterValue,
		func(u api.SandboxStats) float64 { return float64(u.Network.TxBytes) }),
	perSandboxSeries("airlock_sandbox_connections", "TCP sockets open in the sandbox's network namespace.", prometheus.GaugeValue,
		func(u api.SandboxStats) float64 { return float64(u.Network.Connections) }),
}

// Describe implements prometheus.Collector.
func (c *scrape) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descCapMem, descResMem, descCapCPU, descResCPU, descCapSb, descResSb, descDropped, descScrapeErr} {
		ch <- d
	}
	if c.opts.PerSandbox {
		ch <- descSbDropped
		for _, ss := range sandboxSeriesList {
			ch <- ss.desc
		}
	}
}

// Collect implements prometheus.Collector.
func (c *scrape) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := c.src(ctx, c.opts.PerSandbox)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(snap.AuditDropped))
	if err != nil {
		return
	}
	for k, n := range snap.Sandboxes {
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.State, k.Runtime)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descCapMem, float64(snap.CapacityMemory))
	gauge(descResMem, float64(snap.ReservedMemory))
	gauge(descCapCPU, snap.CapacityCPUs)
	gauge(descResCPU, snap.ReservedCPUs)
	gauge(descCapSb, float64(snap.CapacitySandboxes))
	gauge(descResSb, float64(snap.ReservedSandboxes))
	if !c.opts.PerSandbox {
		return
	}
	usage := slices.SortedFunc(slices.Values(snap.Usage), func(a, b api.SandboxStats) int {
		return strings.Compare(a.ID, b.ID)
	})
	keep := min(len(usage), max(c.opts.MaxSandboxSeries, 0))
	gauge(descSbDropped, float64(len(usage)-keep))
	for _, u := range usage[:keep] {
		for _, ss := range sandboxSeriesList {
			ch <- prometheus.MustNewConstMetric(ss.desc, ss.kind, ss.value(u), u.ID, u.Name)
		}
	}
}
