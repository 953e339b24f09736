package manager

import (
	"context"

	"github.com/airlockhq/airlock/internal/store"
)

// notifyEvents wakes every follower; called after an event is stored.
func (m *Manager) notifyEvents() {
	m.evMu.Lock()
	close(m.evCh)
	m.evCh = make(chan struct{})
	m.evMu.Unlock()
}

func (m *Manager) eventsChanged() <-chan struct{} {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	return m.evCh
}

// Events returns owner's events after seq, optionally of one sandbox. With follow it
// waits until there is at least one (or ctx ends).
func (m *Manager) Events(ctx context.Context, owner, ref string, after int64, follow bool) ([]*store.Event, error) {
	f := store.EventFilter{AfterSeq: after, Limit: 1000}
	if ref != "" {
		sb, err := m.Resolve(ctx, owner, ref)
		if err != nil {
			return nil, err
		}
		f.SandboxID = sb.ID
	}
	owners := map[string]bool{}
	for {
		changed := m.eventsChanged()
		evs, err := m.store.ListEvents(ctx, f)
		if err != nil {
			return nil, err
		}
		var out []*store.Event
		for _, ev := range evs {
			f.AfterSeq = ev.Seq
			mine, ok := owners[ev.SandboxID]
			if !ok {
				sb, err := m.store.GetSandbox(ctx, ev.SandboxID)
				mine = err == nil && sb.Owner == owner
				owners[ev.SandboxID] = mine
			}
			if mine {
				out = append(out, ev)
			}
		}
		if len(out) > 0 || !follow {
			return out, nil
		}
		if len(evs) == f.Limit {
			continue // more to scan before waiting
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}
