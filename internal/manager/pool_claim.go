package manager

import (
	"context"
	"errors"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// A create claims a pool member when a pool has exactly what it asks for: the same
// image digest, runtime, limits (after the node's defaults) and network mode. What the
// member becomes is all applied at claim, in the record or from the host: its name
// (record and host name), owner, role, labels, environment (given to every process the
// sandbox starts, see ProcessEnv), lifetime, idle window and TTL, the caller's allow
// rules and session credential (the network attachment is made again for the new owner
// and role), and its secret bindings (none exist for the member's id yet). A create
// that needs what a running container cannot take on — a workspace, a lifetime past the
// member's own deadline, a runtime that cannot rename a container — is a cold create.
//
// Two claims never take the same member: a claim is a compare-and-swap of the member's
// record on its version, which the store makes atomic; the loser tries the next member.
// A drained pool is a miss, and the create goes on cold.

// What a claim writes — the member's record made the caller's, the create's operation
// and its `created` event — is one write when the store can make it one
// (store.ClaimWriter), committed before the create is answered: a burst of claims, whose
// writes the store commits together, then waits for one commit each instead of one per
// record. The operation of a create with no idempotency key is then stored only by
// that write (or, on a miss, before the cold create): nobody can ask for it before the
// answer that names it. So that nothing is stored of a claim that fails, the member
// takes its new identity on the host before the write, under its lock, and takes its
// pool identity back if the write fails.

// claimPage is how many members a claim reads at a time.
const claimPage = 16

// claimPooled lets sb, a create's record not yet stored, take a ready member of a pool
// that matches it, if may. On a claim sb becomes that member's record, stored and
// running. end is the create's operation, which a ClaimWriter's claim ends.
func (m *Manager) claimPooled(ctx context.Context, call Call, sb *store.Sandbox, may bool, end *endOp) (claimed bool, err error) {
	p := m.poolFor(sb)
	if p == nil || !may {
		return false, nil
	}
	hn, ok := m.driver(sb).(runtime.Hostnamer)
	if !ok || !hn.RenamesHost() || sb.Workspace != nil {
		return false, nil
	}
	defer m.pools.wake()
	if _, err := m.reserveLive(ctx, call.Owner, sb.ID); err != nil {
		return false, err
	}
	// A claim re-keys the reservation to the member's id (sb.ID once claimed).
	defer func() { m.releasePending(call.Owner, sb.ID) }()
	// Members are read a page at a time: a burst of claims on a large pool would
	// otherwise each read every member, most of them taken by the time they are tried.
	// A page is viewed, not copied: claims sent at once read the same members, most of
	// them taken by another claim, and the one a claim takes is read again under its
	// lock (claimMember), so only that one is copied.
	f := m.here(store.SandboxFilter{Owner: store.PoolOwner(p.Name), States: []store.State{Running}, Limit: claimPage})
	c := claim{pool: p.Name, hn: hn, end: end}
	for !claimed && err == nil {
		var members []*store.Sandbox
		if err = m.View(ctx, f, func(mem *store.Sandbox) error { members = append(members, mem); return nil }); err != nil {
			return false, err
		}
		for _, mem := range members {
			if claimed, err = m.claimMember(ctx, c, mem, sb); claimed || err != nil {
				break
			}
		}
		if len(members) < claimPage {
			break
		}
		f.After = store.PlaceOf(members[len(members)-1])
	}
	m.pools.mu.Lock()
	if s := m.pools.stat(p.Name); claimed {
		s.hits++
	} else if err == nil {
		s.misses++
	}
	m.pools.mu.Unlock()
	if claimed || err == nil {
		m.metrics.PoolClaim(p.Name, claimed)
	}
	return claimed, err
}

// claim is what claimMember needs besides the member and the caller's record.
type claim struct {
	pool string
	hn   runtime.Hostnamer
	end  *endOp // the create's operation
}

// poolFor is the pool whose members sb could be, or nil.
func (m *Manager) poolFor(sb *store.Sandbox) *store.Pool {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	for _, p := range m.pools.byName {
		if p.Size > 0 && p.ImageDigest == sb.ImageDigest && p.Runtime == sb.Runtime && p.Limits == sb.Limits && p.NetworkMode == sb.Network.Mode {
			return p
		}
	}
	return nil
}

// claimMember makes mem, a member read a moment ago, the sandbox want describes, if it
// is still an untouched member and nobody claimed it first.
func (m *Manager) claimMember(ctx context.Context, cl claim, mem, want *store.Sandbox) (bool, error) {
	if mem.ExpiresAt.Before(want.ExpiresAt) || !m.untouched(mem) {
		return false, nil
	}
	// A member another create is claiming (or the pool is retiring) is skipped, not
	// waited for: claims sent at once each take the next free member side by side
	// instead of queueing behind the first one's claim.
	unlock, ok := m.locks.tryLock(mem.ID)
	if !ok {
		return false, nil
	}
	defer unlock()
	// Read again under the lock: the member is changed on the host before its record,
	// and one claimed (or retired) since it was read is nobody's to change. The page's
	// record may be the store's shared one: from here on only this copy, of the same
	// version, is used and changed.
	cur, err := m.store.GetSandbox(ctx, mem.ID)
	if err != nil || cur.Version != mem.Version {
		return false, nil
	}
	mem = cur
	c := *mem
	c.Name, c.Owner, c.Role, c.CreatedBy = want.Name, want.Owner, want.Role, want.CreatedBy
	c.Env, c.Labels, c.Network = want.Env, want.Labels, want.Network
	c.CreatedAt, c.LastActivity, c.ExpiresAt = want.CreatedAt, want.LastActivity, want.ExpiresAt
	c.IdleSuspend, c.TTL = want.IdleSuspend, want.TTL
	if err := m.takeIdentity(ctx, cl.hn, &c); err != nil {
		m.log.Warn("a claimed pool member could not take its identity; it is removed", "sandbox", c.ID, "err", err)
		if err := m.terminate(ctx, mem, "pool_claim_failed"); err != nil {
			m.log.Warn("terminate a pool member whose claim failed; it is retried", "sandbox", c.ID, "err", err)
		}
		return false, nil // the create goes on, cold if no other member takes it
	}
	m.movePending(want.Owner, want.ID, c.ID)
	err = m.writeClaim(ctx, cl, &c)
	if err != nil {
		m.movePending(want.Owner, c.ID, want.ID)
		m.giveBack(ctx, cl.hn, mem)
	}
	switch {
	case errors.Is(err, errdefs.ErrVersionConflict), errors.Is(err, errdefs.ErrNotFound):
		return false, nil // changed since it was read
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return false, errdefs.Exists("a sandbox named %q already exists", want.Name)
	case err != nil:
		return false, err
	}
	*want = c
	noteSandbox(ctx, c.ID)
	return true, nil
}

// writeClaim stores c, a member's record claimed, with what the claim records
// (claimMember): in one write with a ClaimWriter, which also ends the create's
// operation; otherwise the record, then the event (the caller ends the operation).
func (m *Manager) writeClaim(ctx context.Context, cl claim, c *store.Sandbox) error {
	data := map[string]any{"pool": cl.pool}
	w, one := m.store.(store.ClaimWriter)
	if !one {
		if err := m.store.UpdateSandbox(ctx, c); err != nil {
			return err
		}
		m.event(c, "created", "create", data)
		return nil
	}
	return cl.end.write(ctx, m, w, c, m.newEvent(c, "created", "create", data))
}

// giveBack gives mem, a member whose claim was not stored, its pool identity back on
// the host; one that cannot take it back is removed.
func (m *Manager) giveBack(ctx context.Context, hn runtime.Hostnamer, mem *store.Sandbox) {
	if err := m.takeIdentity(ctx, hn, mem); err != nil {
		m.log.Warn("a pool member whose claim was not stored could not take its pool identity back; it is removed", "sandbox", mem.ID, "err", err)
		if err := m.terminate(ctx, mem, "pool_claim_failed"); err != nil {
			m.log.Warn("terminate a pool member whose claim failed; it is retried", "sandbox", mem.ID, "err", err)
		}
	}
}

// takeIdentity applies to the running container of a claimed member what its record
// now says: host name, secrets and network attachment (owner, role, policy).
func (m *Manager) takeIdentity(ctx context.Context, hn runtime.Hostnamer, sb *store.Sandbox) error {
	if err := hn.SetHostname(ctx, sb.ID, sb.Name); err != nil {
		return err
	}
	m.stopSecrets(sb.ID)
	files, err := m.deliverSecrets(ctx, sb, false)
	if err != nil {
		return err
	}
	if len(files) > 0 {
		return errors.New("a new sandbox has secret files to mount")
	}
	if m.net == nil {
		return nil
	}
	pol, err := parsePolicy(sb.Network)
	if err != nil {
		return err
	}
	if r, ok := m.net.(netattach.Reassigner); ok && r.Reassign(sb.ID, sb.Owner, sb.Role, sb.Generation, pol) {
		return nil
	}
	if _, err := m.net.Attach(ctx, sb, pol); err != nil {
		return err
	}
	m.net.SetPolicy(sb.ID, sb.Generation, pol)
	return nil
}
