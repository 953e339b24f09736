package server

import (
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
)

// encodedSandboxes keeps the JSON each sandbox record was last listed as, by id, with
// the version, update time and last activity of the record it was made from: a list of
// thousands spent a third of its time converting and encoding records that had not
// changed since the last list. A record is encoded again when any of the three
// differs, and every write of a record bumps its version (and its update time, so a
// record deleted and made again under the same id does not match either). The JSON is
// a function of the record alone (toAPISandbox reads nothing else), and which records
// a caller sees is decided before this, so one owner never gets another's; with a
// store shared by several nodes, a write by another node bumps the version the list
// reads, as here. At most maxEncoded records of maxEncodedBytes in all are kept (a
// deleted record's JSON stays until then, and one record's environment alone may be
// megabytes); past either the next list starts afresh.
type encodedSandboxes struct {
	mu    sync.Mutex
	m     map[string]encodedSandbox
	bytes int // of the JSON in m
}

type encodedSandbox struct {
	version           int64
	updated, activity time.Time
	json              []byte // never changed once kept
}

const (
	maxEncoded      = 50_000
	maxEncodedBytes = 128 << 20
)

// json is sb as a list holds it (api.AppendSandbox of toAPISandbox).
func (e *encodedSandboxes) json(sb *manager.Sandbox) ([]byte, error) {
	e.mu.Lock()
	k, ok := e.m[sb.ID]
	e.mu.Unlock()
	if ok && k.version == sb.Version && k.updated.Equal(sb.UpdatedAt) && k.activity.Equal(sb.LastActivity) {
		return k.json, nil
	}
	b, err := api.AppendSandbox(nil, toAPISandbox(sb))
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if old, ok := e.m[sb.ID]; ok {
		e.bytes -= len(old.json)
	}
	if e.m == nil || len(e.m) >= maxEncoded || e.bytes+len(b) > maxEncodedBytes {
		e.m, e.bytes = map[string]encodedSandbox{}, 0
	}
	e.m[sb.ID] = encodedSandbox{version: sb.Version, updated: sb.UpdatedAt, activity: sb.LastActivity, json: b}
	e.bytes += len(b)
	e.mu.Unlock()
	return b, nil
}
