package manager

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/store"
)

// SetMembership gives the manager the node's lease in its cluster: new sandboxes are
// placed on this node only while the lease says it is ready, and the nodes routes
// answer from it. Without one the node is alone and always places.
func (m *Manager) SetMembership(l *membership.Lease) { m.member = l }

// NodeName is the node's name, which each of its sandboxes' records carries.
func (m *Manager) NodeName() string { return m.cfg.NodeName }

// placeHere says why a new sandbox may not be placed on this node (nil: it may): a
// drained node, or one that no longer holds its lease, takes none. Sandboxes it has
// go on, resume and restore as before.
func (m *Manager) placeHere() error {
	if m.member == nil {
		return nil
	}
	return m.member.Placeable()
}

// ownRecord says whether sb is this node's: records from before nodes were named
// (Node "") are.
func (m *Manager) ownRecord(sb *store.Sandbox) bool {
	return sb.Node == "" || sb.Node == m.cfg.NodeName
}

// here narrows f to this node's sandboxes (ownRecord), the only ones its loops act on:
// another node's containers, upper layers and pool members are that node's to manage.
func (m *Manager) here(f store.SandboxFilter) store.SandboxFilter {
	f.Node = m.cfg.NodeName
	return f
}

// reserving are the states in which a sandbox holds its memory and CPU on its node.
var reserving = []store.State{Creating, Running, Resuming, Suspending}

// Reserved is what this node's sandboxes reserve now: their memory and CPU limits, and
// how many there are, counting those whose container exists or is being made.
func (m *Manager) Reserved(ctx context.Context) (store.Resources, error) {
	return m.reservedHere(ctx, nil)
}

// reservedHere sums, in one query, what the records of this node's sandboxes (here)
// reserve, but for the ids in except.
func (m *Manager) reservedHere(ctx context.Context, except []string) (store.Resources, error) {
	// Only this node's records (and those from before nodes were named) are read: the
	// cluster's others are not this node's to count.
	sums, err := m.store.ReservedByNode(ctx, reserving, except, []string{m.cfg.NodeName, ""})
	if err != nil {
		return store.Resources{}, err
	}
	r := sums[m.cfg.NodeName]
	if old := sums[""]; m.cfg.NodeName != "" { // records from before nodes were named
		r.Memory, r.CPUs, r.Sandboxes = r.Memory+old.Memory, r.CPUs+old.CPUs, r.Sandboxes+old.Sandboxes
	}
	return r, nil
}

// Nodes lists the nodes of the cluster (administrators only: the caller's edge checks).
func (m *Manager) Nodes(ctx context.Context) ([]membership.NodeInfo, error) {
	if m.member == nil {
		return nil, errdefs.Unavailable("this node keeps no membership lease")
	}
	return m.member.Nodes(ctx)
}

// SetNodeDraining drains node name (no new sandbox is placed on it; its sandboxes go
// on) or makes it ready again.
func (m *Manager) SetNodeDraining(ctx context.Context, name string, draining bool) (membership.NodeInfo, error) {
	if m.member == nil {
		return membership.NodeInfo{}, errdefs.Unavailable("this node keeps no membership lease")
	}
	return m.member.SetDraining(ctx, name, draining)
}

// ownSandboxes lists every record of this node's sandboxes, and names this node in
// those from before nodes were named: what recovery reconciles with the host. Other
// nodes' sandboxes are theirs to recover.
func (m *Manager) ownSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	own, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{}))
	if err != nil {
		return nil, err
	}
	for _, sb := range own {
		if sb.Node == "" && m.cfg.NodeName != "" && sb.State != Terminated {
			sb.Node = m.cfg.NodeName
			if err := m.store.UpdateSandbox(ctx, sb); err != nil {
				return nil, fmt.Errorf("name the node of sandbox %s: %w", sb.ID, err)
			}
		}
	}
	return own, nil
}

// NodeOf is the node where a call about owner's sandbox ref is answered: the node that
// holds it ("": a record from before nodes were named, this node's), one store read;
// but this node for a lost sandbox, and for a suspended one that moves here when used
// (move.go) because its node is lost or stopped, or, for a resume, drained.
func (m *Manager) NodeOf(ctx context.Context, owner, ref string, resume bool) (string, error) {
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return "", err
	}
	if m.ownRecord(sb) {
		return sb.Node, nil
	}
	if sb.State == Lost {
		return m.cfg.NodeName, nil
	}
	if st, away := m.nodeAway(ctx, sb); away && (st != store.NodeDraining || resume) && m.filesCurrent(sb) {
		return m.cfg.NodeName, nil
	}
	return sb.Node, nil
}
