package sqlite

import (
	"sync"

	"github.com/airlockhq/airlock/internal/store"
)

// decoded keeps the sandbox records a list decoded, by id, with the version they were
// decoded at: a list of thousands of sandboxes spent most of its time decoding JSON
// documents that had not changed since the last list. A row whose version differs is
// decoded again (every write of a record bumps its version). A kept record is never
// changed (a new version replaces it): ListSandboxes hands out clones of it, and
// ViewSandboxes the record itself to a caller that only reads it. At most maxDecoded records are kept; past that the next list
// starts afresh.
type decoded struct {
	mu sync.Mutex
	m  map[string]*store.Sandbox
}

const maxDecoded = 50_000

// get returns the kept record of id at version, or nil. It is shared: never change it.
func (d *decoded) get(id string, version int64) *store.Sandbox {
	d.mu.Lock()
	sb := d.m[id]
	d.mu.Unlock()
	if sb == nil || sb.Version != version {
		return nil
	}
	return sb
}

// put keeps sb, which nobody may change from then on.
func (d *decoded) put(sb *store.Sandbox) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= maxDecoded {
		d.m = map[string]*store.Sandbox{}
	}
	d.m[sb.ID] = sb
}

func (d *decoded) forget(id string) {
	d.mu.Lock()
	delete(d.m, id)
	d.mu.Unlock()
}
