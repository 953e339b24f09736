package sqlite

import (
	"sync"

	"github.com/airlockhq/airlock/internal/store"
)

// decoded keeps the sandbox records a list decoded, by id, with the version they were
// decoded at: a list of thousands of sandboxes spent most of its time decoding JSON
// documents that had not changed since the last list. A row whose version differs is
// decoded again (every write of a record bumps its version), and callers get clones,
// never the kept record. At most maxDecoded records are kept; past that the next list
// starts afresh.
type decoded struct {
	mu sync.Mutex
	m  map[string]*store.Sandbox
}

const maxDecoded = 50_000

func (d *decoded) get(id string, version int64) *store.Sandbox {
	d.mu.Lock()
	sb := d.m[id]
	d.mu.Unlock()
	if sb == nil || sb.Version != version {
		return nil
	}
	return sb.Clone()
}

func (d *decoded) put(sb *store.Sandbox) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= maxDecoded {
		d.m = map[string]*store.Sandbox{}
	}
	d.m[sb.ID] = sb.Clone()
}

func (d *decoded) forget(id string) {
	d.mu.Lock()
	delete(d.m, id)
	d.mu.Unlock()
}
