package manager

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Usage: one collector goroutine reads every running sandbox of the node at an interval
// (UsageConfig.Interval) from the host kernel's accounting: the driver's cgroup, disk
// and socket readings, and the network's counters of every link in one read. It keeps
// each sandbox's latest reading and a ring of its last History samples for graphs; the
// rings together hold at most Budget samples (a sandbox past that has no history), and
// a sandbox's ring is freed at the first sample after it stops. Calls answer from what
// was collected: reading stats never reads the host, but for a sandbox that started
// since the last sample.

// UsageConfig sets the usage collector.
type UsageConfig struct {
	// Interval is how often every running sandbox is sampled (default 10 s: about
	// 1.5% of a core at 1,000 running sandboxes, bench/RESULTS.md; negative: only when
	// CollectUsage is called).
	Interval time.Duration
	// History is how many samples each sandbox's ring keeps (default 60).
	History int
	// Budget caps the samples all rings hold together (default 60 × 4096).
	Budget int
}

func (c UsageConfig) withDefaults() UsageConfig {
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.History <= 0 {
		c.History = 60
	}
	if c.Budget <= 0 {
		c.Budget = 60 * 4096
	}
	return c
}

// usageSample is one point of a ring: 32 bytes.
type usageSample struct {
	at    int64 // unix nanoseconds
	cores float32
	mem   int64
	disk  int64
}

type usageEntry struct {
	last     api.SandboxStats
	cpuNanos int64
	at       time.Time
	ring     []usageSample // nil: past the budget
	next     int
	count    int
}

// usageBook is what the collector keeps, by sandbox id.
type usageBook struct {
	mu       sync.Mutex
	cfg      UsageConfig
	maxRings int
	rings    int
	byID     map[string]*usageEntry
}

func newUsageBook(cfg UsageConfig) *usageBook {
	cfg = cfg.withDefaults()
	return &usageBook{cfg: cfg, maxRings: cfg.Budget / cfg.History, byID: map[string]*usageEntry{}}
}

// record adds a reading of sb taken at now.
func (b *usageBook) record(sb *store.Sandbox, st runtime.Stats, tr netattach.Traffic, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.byID[sb.ID]
	if e == nil {
		e = &usageEntry{}
		if b.rings < b.maxRings {
			e.ring = make([]usageSample, b.cfg.History)
			b.rings++
		}
		b.byID[sb.ID] = e
	}
	var cores float64
	if !e.at.IsZero() && st.CPUNanos >= e.cpuNanos && now.After(e.at) {
		cores = float64(st.CPUNanos-e.cpuNanos) / float64(now.Sub(e.at).Nanoseconds())
	}
	e.cpuNanos, e.at = st.CPUNanos, now
	e.last = statsOf(sb, st, tr, cores, now)
	if e.ring != nil {
		e.ring[e.next] = usageSample{at: now.UnixNano(), cores: float32(cores), mem: st.MemoryBytes, disk: st.DiskUsed}
		e.next = (e.next + 1) % len(e.ring)
		e.count = min(e.count+1, len(e.ring))
	}
}

// keep frees the entries of every sandbox not in live.
func (b *usageBook) keep(live map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, e := range b.byID {
		if !live[id] {
			if e.ring != nil {
				b.rings--
			}
			delete(b.byID, id)
		}
	}
}

// get returns sb's latest reading, with its history if asked; ok is false when there
// is none.
func (b *usageBook) get(id string, history bool) (out api.SandboxStats, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.byID[id]
	if e == nil {
		return out, false
	}
	out = e.last
	if history {
		out.History = make([]api.StatsSample, 0, e.count)
		for i := range e.count {
			s := e.ring[(e.next-e.count+i+len(e.ring))%len(e.ring)]
			out.History = append(out.History, api.StatsSample{Time: time.Unix(0, s.at).UTC(), CPUCores: float64(s.cores), MemoryBytes: s.mem, DiskBytes: s.disk})
		}
	}
	return out, true
}

// each calls fn with every latest reading, under the book's lock.
func (b *usageBook) each(fn func(api.SandboxStats)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.byID {
		fn(e.last)
	}
}

// statsOf is sb's usage from a reading. A limit the reading lacks (a driver that reads
// none) is the one the sandbox's record asked for.
func statsOf(sb *store.Sandbox, st runtime.Stats, tr netattach.Traffic, cores float64, now time.Time) api.SandboxStats {
	out := zeroStats(sb, now)
	out.CPU = api.CPUStats{Cores: cores, UsageSeconds: float64(st.CPUNanos) / 1e9, LimitCores: cmp.Or(st.CPULimit, sb.Limits.CPU)}
	out.Memory = api.MemoryStats{UsedBytes: st.MemoryBytes, LimitBytes: cmp.Or(st.MemoryLimit, sb.Limits.Memory), PeakBytes: st.MemoryPeak}
	out.Disk = api.DiskStats{UsedBytes: st.DiskUsed, LimitBytes: cmp.Or(st.DiskLimit, sb.Limits.Disk)}
	out.PIDs = api.PIDStats{Current: st.PIDs, Limit: cmp.Or(st.PIDsLimit, sb.Limits.PIDs)}
	out.Network = api.NetworkStats{RxBytes: tr.RxBytes, TxBytes: tr.TxBytes, Connections: st.Connections}
	return out
}

// zeroStats is what a sandbox that is not running answers: its state, no usage.
func zeroStats(sb *store.Sandbox, now time.Time) api.SandboxStats {
	return api.SandboxStats{ID: sb.ID, Name: sb.Name, State: string(sb.State), Time: now.UTC()}
}

// UsageInterval is how often the node samples its sandboxes.
func (m *Manager) UsageInterval() time.Duration { return m.usage.cfg.Interval }

// startUsage runs the collector until the manager closes.
func (m *Manager) startUsage() {
	if m.usage.cfg.Interval < 0 {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.usage.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-t.C:
				m.CollectUsage(m.ctx)
			}
		}
	}()
}

// CollectUsage samples every running sandbox of the node once (the collector's tick).
func (m *Manager) CollectUsage(ctx context.Context) {
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: []store.State{Running}}))
	if err != nil {
		m.log.Warn("usage: list sandboxes", "err", err)
		return
	}
	traffic := m.traffic()
	live := make(map[string]bool, len(list))
	for _, sb := range list {
		st, err := m.readUsage(ctx, sb)
		if err != nil {
			continue // stopping, or not started yet
		}
		live[sb.ID] = true
		m.usage.record(sb, st, traffic[sb.ID], m.now())
	}
	m.usage.keep(live)
}

// readUsage reads sb's usage, with the driver's cheaper read where it has one.
func (m *Manager) readUsage(ctx context.Context, sb *store.Sandbox) (runtime.Stats, error) {
	drv := m.driver(sb)
	if ur, ok := drv.(runtime.UsageReader); ok {
		return ur.Usage(ctx, sb.ID)
	}
	return drv.Stats(ctx, sb.ID)
}

// traffic reads every sandbox's traffic, when the network counts it.
func (m *Manager) traffic() map[string]netattach.Traffic {
	tc, ok := m.net.(netattach.TrafficCounter)
	if !ok {
		return nil
	}
	t, err := tc.Traffic()
	if err != nil {
		m.log.Warn("usage: read network counters", "err", err)
	}
	return t
}

// SandboxStats is the usage of one of owner's sandboxes (history: with its ring).
func (m *Manager) SandboxStats(ctx context.Context, owner, ref string, history bool) (api.SandboxStats, error) {
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return api.SandboxStats{}, err
	}
	out := m.statsFor(ctx, sb, history, true)
	if history && out.History == nil {
		out.History = []api.StatsSample{} // asked for: present, if empty
	}
	return out, nil
}

// statsFor answers sb's usage from the collector's book; a running sandbox it has not
// sampled yet is read now when fresh is set (with no CPU rate: that takes two readings).
func (m *Manager) statsFor(ctx context.Context, sb *store.Sandbox, history, fresh bool) api.SandboxStats {
	if sb.State != Running {
		return zeroStats(sb, m.now())
	}
	if out, ok := m.usage.get(sb.ID, history); ok {
		out.Name, out.State = sb.Name, string(sb.State) // a claimed pool member is renamed
		return out
	}
	if fresh {
		if st, err := m.readUsage(ctx, sb); err == nil {
			return statsOf(sb, st, m.traffic()[sb.ID], 0, m.now())
		}
	}
	return zeroStats(sb, m.now())
}

// AllStats is the usage of every sandbox of owner's (every owner's when owner is "")
// that is not terminated and that keep keeps (all when keep is nil).
func (m *Manager) AllStats(ctx context.Context, owner string, keep func(*Sandbox) bool) ([]api.SandboxStats, error) {
	list, err := m.List(ctx, store.SandboxFilter{Owner: owner, States: liveStates})
	if err != nil {
		return nil, err
	}
	out := make([]api.SandboxStats, 0, len(list))
	fresh := maxFreshReads
	for _, sb := range list {
		if keep == nil || keep(sb) {
			read := fresh > 0 && sb.State == Running && !m.usage.has(sb.ID)
			if read {
				fresh--
			}
			out = append(out, m.statsFor(ctx, sb, false, read))
		}
	}
	return out, nil
}

// maxFreshReads bounds the sandboxes one AllStats reads from the host itself (those
// started since the last sample); the others answer zeros until the collector's next.
const maxFreshReads = 32

// has says whether the book has a reading of sandbox id.
func (b *usageBook) has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byID[id] != nil
}

// EachUsage calls fn with the latest reading of every sandbox the collector sampled.
func (m *Manager) EachUsage(fn func(api.SandboxStats)) { m.usage.each(fn) }
