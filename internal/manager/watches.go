package manager

import (
	"context"
	"sync"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// maxWatches bounds the watches open at once on one sandbox: file watches (each an
// inotify instance in the sandbox and a connection to its agent, for as long as the
// caller keeps it) and watched sessions (a connection the daemon keeps until the
// session ends). A variable for tests.
var maxWatches = 256

// takeWatch holds one of sb's watch places until release is called (once is enough;
// more are no-ops), or says that sb has none left.
func (m *Manager) takeWatch(sb *store.Sandbox) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watches[sb.ID] >= maxWatches {
		return nil, errdefs.Quota("sandbox %q has %d watches open (file watches and sessions), the most one sandbox may have; close one first", sb.Name, maxWatches).
			WithDetails(map[string]any{"limit": maxWatches})
	}
	m.watches[sb.ID]++
	return sync.OnceFunc(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.watches[sb.ID]--; m.watches[sb.ID] <= 0 {
			delete(m.watches, sb.ID)
		}
	}), nil
}

// Watch is a stream of changes under a directory of a sandbox; Close gives back its
// place among the sandbox's watches.
type Watch struct {
	*agent.Watch
	release func()
}

// Close ends the watch.
func (w *Watch) Close() error {
	defer w.release()
	return w.Watch.Close()
}

// Watch watches the directory path (and, recursive, every directory below it); at most
// maxWatches are open on one sandbox.
func (w *Work) Watch(ctx context.Context, path string, recursive bool) (*Watch, error) {
	release, err := w.m.takeWatch(w.sb)
	if err != nil {
		return nil, err
	}
	wa, err := w.cl.Watch(ctx, path, recursive)
	if err != nil {
		release()
		return nil, w.fail(err)
	}
	return &Watch{Watch: wa, release: release}, nil
}
