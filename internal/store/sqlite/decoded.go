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
// ViewSandboxes the record itself to a caller that only reads it. At most maxDecoded
// records from maxDecodedBytes of documents in all are kept (a deleted record stays
// until then, and one record's environment alone may be megabytes); past either the
// next list starts afresh.
type decoded struct {
	mu    sync.Mutex
	m     map[string]decodedSandbox
	bytes int // of the documents the records in m were decoded from
}

type decodedSandbox struct {
	sb   *store.Sandbox
	size int // of its document
}

const (
	maxDecoded      = 50_000
	maxDecodedBytes = 128 << 20
)

// get returns the kept record of id at version, or nil. It is shared: never change it.
func (d *decoded) get(id string, version int64) *store.Sandbox {
	d.mu.Lock()
	sb := d.m[id].sb
	d.mu.Unlock()
	if sb == nil || sb.Version != version {
		return nil
	}
	return sb
}

// put keeps sb, decoded from a document of size bytes, which nobody may change from
// then on.
func (d *decoded) put(sb *store.Sandbox, size int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bytes -= d.m[sb.ID].size
	if d.m == nil || len(d.m) >= maxDecoded || d.bytes+size > maxDecodedBytes {
		d.m, d.bytes = map[string]decodedSandbox{}, 0
	}
	d.m[sb.ID] = decodedSandbox{sb: sb, size: size}
	d.bytes += size
}

func (d *decoded) forget(id string) {
	d.mu.Lock()
	d.bytes -= d.m[id].size
	delete(d.m, id)
	d.mu.Unlock()
}
