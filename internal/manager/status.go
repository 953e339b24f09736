package manager

import (
	"context"
	"fmt"
	"slices"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Health is what the node can do and how many live sandboxes of owner's the caller sees.
type Health struct {
	Sandboxes int
	// Checks come first from the store, then from the runtime driver; Detail may name
	// host paths and versions, for the node's administrators only.
	Checks []runtime.Check
}

// Health checks the store and the driver, and counts owner's live sandboxes that keep
// keeps (every one, when keep is nil).
func (m *Manager) Health(ctx context.Context, owner string, keep func(*Sandbox) bool) Health {
	list, err := m.List(ctx, store.SandboxFilter{Owner: owner, States: []store.State{Running, Suspended, Creating}})
	if keep != nil {
		list = slices.DeleteFunc(list, func(sb *Sandbox) bool { return !keep(sb) })
	}
	c := runtime.Check{Name: "store", OK: err == nil, Detail: "the store"}
	if d, ok := m.store.(fmt.Stringer); ok {
		c.Detail = d.String() // which store, and where; never a password
	}
	if err != nil {
		c.Degrades = "the daemon cannot read or write its records: " + err.Error()
	}
	h := Health{Sandboxes: len(list), Checks: []runtime.Check{c, m.cleanupCheck(ctx)}}
	m.eachDriver(func(drv runtime.Driver) {
		if hc, ok := drv.(runtime.HealthChecker); ok {
			h.Checks = append(h.Checks, hc.Health(ctx)...)
		}
	})
	if c, ok := m.stateDiskCheck(); ok {
		h.Checks = append(h.Checks, c)
	}
	for _, probe := range m.probes {
		if c, ok := probe(ctx); ok {
			h.Checks = append(h.Checks, c)
		}
	}
	return h
}

// ImageUsers reports the owners of the sandboxes not terminated on each image, and of
// the terminated ones whose cleanup is pending (their root filesystems may still be
// mounted on its layers), from one read of the sandboxes made on first use, after the
// cleanups running then have ended. When a read fails every image counts as used, by
// caller too: when in doubt, keep it.
func (m *Manager) ImageUsers(ctx context.Context, caller string) image.Users {
	var byDigest map[string][]string
	var failed bool
	return func(digest string) []string {
		if byDigest == nil && !failed {
			m.WaitCleanups(ctx)
			list, err := m.List(ctx, store.SandboxFilter{})
			pending, perr := m.pendingCleanups(ctx)
			if err != nil || perr != nil {
				failed = true
			} else {
				cleaning := map[string]bool{}
				for _, op := range pending {
					cleaning[op.SandboxID] = true
				}
				byDigest = map[string][]string{}
				for _, sb := range list {
					if (sb.State != Terminated || cleaning[sb.ID]) && !slices.Contains(byDigest[sb.ImageDigest], sb.Owner) {
						byDigest[sb.ImageDigest] = append(byDigest[sb.ImageDigest], sb.Owner)
					}
				}
			}
		}
		if failed {
			return []string{caller}
		}
		return byDigest[digest]
	}
}

// A Probe checks something of the host no runtime of the node uses yet (a runtime that
// could be added); ok is false when it has nothing to say.
type Probe func(ctx context.Context) (c runtime.Check, ok bool)

// AddProbe adds p to what Health reports.
func (m *Manager) AddProbe(p Probe) { m.probes = append(m.probes, p) }
