package manager

import (
	"context"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/store"
)

// SetMetrics makes the manager count its work into s (nil: nothing is counted). Call it
// before Start.
func (m *Manager) SetMetrics(s *metrics.Set) { m.metrics = s }

// MetricsSnapshot is what a scrape of the node's metrics reads: its sandboxes that are
// not terminated by state and runtime (one read of this node's records), its capacity
// and reservations, and, when perSandbox, every sampled sandbox's latest usage.
func (m *Manager) MetricsSnapshot(ctx context.Context, perSandbox bool) (metrics.Snapshot, error) {
	snap := metrics.Snapshot{AuditDropped: m.AuditDropped(), CapacityCPUs: m.cfg.HostCPU, CapacitySandboxes: m.cfg.UIDSlots,
		CapacityMemory: m.NodeMemory()}
	if snap.CapacityMemory == 0 {
		snap.CapacityMemory = m.cfg.HostMemory
	}
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: liveStates}))
	if err != nil {
		return snap, err
	}
	snap.Sandboxes = map[metrics.StateRuntime]int{}
	for _, sb := range list {
		rt := sb.Runtime
		if rt == "" {
			rt = m.defaultRuntime
		}
		snap.Sandboxes[metrics.StateRuntime{State: string(sb.State), Runtime: rt}]++
	}
	res, err := m.Reserved(ctx)
	if err != nil {
		return snap, err
	}
	snap.ReservedMemory, snap.ReservedCPUs, snap.ReservedSandboxes = res.Memory, res.CPUs, res.Sandboxes
	if perSandbox {
		m.usage.each(func(u api.SandboxStats) { snap.Usage = append(snap.Usage, u) })
	}
	return snap, nil
}

// opDone counts a finished operation into the node's metrics.
func (m *Manager) opDone(op *store.Operation) {
	code := ""
	if op.State == store.OpFailed {
		code = op.ErrorCode
	}
	m.metrics.Operation(op.Kind, time.Since(op.CreatedAt), code)
}
