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
	// The store filters by owner, so another owner's flood of events never fills a page.
	f := store.EventFilter{AfterSeq: after, Limit: 1000, Owner: owner}
	if ref != "" {
		sb, err := m.Resolve(ctx, owner, ref)
		if err != nil {
			return nil, err
		}
		f.SandboxID = sb.ID
	}
	for {
		changed := m.eventsChanged()
		evs, err := m.store.ListEvents(ctx, f)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 || !follow {
			return evs, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}
