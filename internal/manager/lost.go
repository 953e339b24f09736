package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Losing a node. A node whose membership lease lapsed is lost: any live node that sees
// it fences it (store.FenceNode, keyed on the lost node's epoch, so the nodes that see
// it at once mark each sandbox once) and its sandboxes that were creating, running,
// suspending or resuming become lost, with a node_lost event each. A lost sandbox
// answers every call with what happened and what can be done: resume it (move.go), on
// any node, from its last suspend in the object store or its newest snapshot, or
// terminate it. Its suspended sandboxes stay suspended; they move when resumed.
//
// A node that comes back fences itself: a container whose record names another node
// now, or whose record is gone, is stale (the sandbox moved, or ended) and is deleted
// with its upper layer, never started; a lost record that still names this node goes
// back to suspended with its upper layer (node_returned). A node whose lease another
// instance took over acts on no sandbox (acting).

// lostErr is the refusal of every call on a lost sandbox but resume and terminate.
func lostErr(sb *store.Sandbox) error {
	from := "its newest snapshot, if it has one"
	if sb.Files != "" {
		from = "its last suspend (" + stamp(sb.FilesAt) + "), or a newer snapshot"
	}
	return errdefs.Precondition("sandbox %q was lost with its node %q at %s: its processes, and its changes since it last suspended, were on that node. `airlock resume %s` starts it again on the node that takes the call, from %s; or terminate it",
		sb.Name, sb.Node, stamp(sb.LostAt), sb.Name, from).
		WithDetails(map[string]any{"reason": "node_lost", "node": sb.Node, "state": string(Lost), "lost_at": sb.LostAt.UTC(), "files": sb.Files})
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// acting refuses every action while another instance holds this node's name: the
// sandboxes its records name are that instance's now.
func (m *Manager) acting() error {
	if m.member == nil {
		return nil
	}
	return m.member.Held()
}

// WatchNodes fences the nodes whose leases lapsed (once each epoch; any node may,
// several at once), deletes this node's containers of sandboxes that moved to another
// node, and, while this node is drained, puts its suspended sandboxes' files in the
// object store. The sweep runs it; tests call it with an injected clock.
func (m *Manager) WatchNodes(ctx context.Context) {
	if m.member == nil || m.acting() != nil {
		return
	}
	m.fenceLostNodes(ctx)
	m.takeBackLost(ctx)
	// Only a store other nodes share can give this node's sandboxes to another. On a
	// node alone the look (every container the runtimes list, every live record, every
	// sweep) found nothing and cost the most where a node holds the most sandboxes.
	if store.IsShared(m.store) {
		m.removeMoved(ctx)
	}
	if m.member.Draining() {
		m.uploadSuspended(ctx)
	}
}

// fenceLostNodes marks the sandboxes of every lost node lost.
func (m *Manager) fenceLostNodes(ctx context.Context) {
	nodes, err := m.store.ListNodes(ctx)
	if err != nil {
		m.log.Warn("list nodes", "err", err)
		return
	}
	now := m.now()
	for _, n := range nodes {
		if n.Name == m.cfg.NodeName || n.StateAt(now) != store.NodeLost || n.FencedEpoch >= n.Epoch {
			continue
		}
		from := map[string]State{}
		marked, err := m.store.FenceNode(ctx, n.Name, n.Epoch, now, fencedStates, func(sb *store.Sandbox) {
			from[sb.ID] = sb.State
			sb.State, sb.LostAt = Lost, now
			sb.Failure = fmt.Sprintf("node %q was lost: its lease lapsed at %s", n.Name, stamp(n.LeaseExpires))
		})
		if errors.Is(err, errdefs.ErrVersionConflict) || errors.Is(err, errdefs.ErrFailedPrecondition) {
			continue // it came back meanwhile
		}
		if err != nil {
			m.log.Warn("fence a lost node", "node", n.Name, "err", err)
			continue
		}
		if len(marked) > 0 {
			m.log.Warn("node lost; its sandboxes are marked lost", "node", n.Name, "epoch", n.Epoch, "sandboxes", len(marked))
		}
		for _, sb := range marked {
			m.event(sb, "node_lost", "node_lost", map[string]any{"node": n.Name, "epoch": n.Epoch,
				"lease_expired": n.LeaseExpires.UTC(), "from": string(from[sb.ID]), "to": string(Lost)})
		}
	}
}

// removeMoved deletes this node's containers and upper layers of sandboxes whose
// records name another node now: they moved while this node was away, and the copy
// here must never run again.
func (m *Manager) removeMoved(ctx context.Context) {
	own, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: liveStates}))
	if err != nil {
		return
	}
	here := map[string]bool{}
	for _, sb := range own {
		here[sb.ID] = true
	}
	m.eachDriverIDs(ctx, func(drv runtime.Driver, ids []string) {
		for _, id := range ids {
			if here[id] {
				continue
			}
			sb, err := m.store.GetSandbox(ctx, id)
			if err != nil || m.ownRecord(sb) {
				continue
			}
			m.removeStale(ctx, drv, sb)
		}
	})
}

// removeStale deletes the container and upper layer of sb, which another node holds.
func (m *Manager) removeStale(ctx context.Context, drv runtime.Driver, sb *store.Sandbox) {
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	m.log.Warn("remove a stale copy of a sandbox another node holds", "sandbox", sb.ID, "node", sb.Node, "generation", sb.Generation)
	m.detach(ctx, sb.ID)
	if err := drv.Delete(ctx, sb.ID); err != nil {
		m.log.Warn("remove a stale sandbox", "sandbox", sb.ID, "err", err)
		return
	}
	m.freeSlot(sb.UIDBase, sb.ID)
}

// takeBackLost suspends again this node's sandboxes that were marked lost while it was
// away but still alive (its lease lapsed and it renewed since): see recoverLost.
func (m *Manager) takeBackLost(ctx context.Context) {
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: []State{Lost}}))
	if err != nil {
		return
	}
	for _, sb := range list {
		m.sweepOne(ctx, sb.ID, Lost, m.recoverLost)
	}
}

// recoverLost is the recovery of a lost record that still names this node: the node
// is back, and so is the sandbox's upper layer. Its container (if any still runs) is
// stopped and it is suspended again, its files uploaded when the node has an object
// store; a resume starts it from its layer here, all its changes kept.
func (m *Manager) recoverLost(ctx context.Context, sb *store.Sandbox) error {
	if err := m.driver(sb).Stop(ctx, sb.ID); err != nil {
		return err
	}
	m.detach(ctx, sb.ID)
	sb.SuspendedAt, sb.LostAt, sb.Failure = m.now(), time.Time{}, ""
	if err := m.setState(ctx, sb, Suspended, "node_returned"); err != nil {
		return err
	}
	m.event(sb, "node_returned", "recover", map[string]any{"node": m.cfg.NodeName})
	m.uploadFiles(ctx, sb)
	return nil
}
