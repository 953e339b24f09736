// Package storetest is the conformance suite for store.Store. Every implementation
// (store/sqlite, store/postgres) runs Run and must pass all of it, so the
// rules in the interface's doc comments hold the same way everywhere. It owns only
// tests and their helpers; it must not import any implementation, nor assume anything
// the interface does not document.
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// Run runs the whole suite, one subtest per rule.
//
// open must return a store on fresh, empty storage for each (sub)test it is called in,
// and close it when that test ends (t.Cleanup); Close must be safe to call twice. A
// second call of open within the same test, made after the suite closed the first
// store, must reach the same storage: that is how the suite checks that data survives
// a re-open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T) store.Store)
	}{
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"CreateSandboxDuplicateID", testCreateSandboxDuplicateID},
		{"NameUniquePerOwner", testNameUniquePerOwner},
		{"NameReusedAfterTerminate", testNameReusedAfterTerminate},
		{"RevivingTakesTheName", testRevivingTakesTheName},
		{"GetSandboxByName", testGetSandboxByName},
		{"GetSandboxNotFound", testGetSandboxNotFound},
		{"ListSandboxes", testListSandboxes},
		{"ListSandboxesPaged", testListSandboxesPaged},
		{"UpdateSandbox", testUpdateSandbox},
		{"UpdateSandboxVersionConflict", testUpdateSandboxVersionConflict},
		{"UpdateSandboxNotFound", testUpdateSandboxNotFound},
		{"DeleteSandbox", testDeleteSandbox},
		{"OperationRoundTrip", testOperationRoundTrip},
		{"IdempotencyKeyReplay", testIdempotencyKeyReplay},
		{"UpdateOperation", testUpdateOperation},
		{"ListOperations", testListOperations},
		{"ListOperationsFilters", testListOperationsFilters},
		{"EventsInSeqOrder", testEventsInSeqOrder},
		{"ListEventsFilter", testListEventsFilter},
		{"ListEventsDefaultLimit", testListEventsDefaultLimit},
		{"AppendEventsBatch", testAppendEventsBatch},
		{"PruneEventsPerSandbox", testPruneEventsPerSandbox},
		{"PruneEventsByAge", testPruneEventsByAge},
		{"ConcurrentCreates", testConcurrentCreates},
		{"ConcurrentCreatesSameName", testConcurrentCreatesSameName},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"ConcurrentIdempotencyKey", testConcurrentIdempotencyKey},
		{"ConcurrentEvents", testConcurrentEvents},
		{"Reopen", testReopen},
		{"Pools", testPools},
		{"Identities", testIdentities},
		{"Secrets", testSecrets},
		{"ForeignText", testForeignText},
		{"IdempotencyKeyBytes", testIdempotencyKeyBytes},
		{"NodeLease", testNodeLease},
		{"NodeNameHeld", testNodeNameHeld},
		{"ConcurrentNodes", testConcurrentNodes},
		{"NodePlacement", testNodePlacement},
		{"FenceNode", testFenceNode},
		{"ConcurrentAuditAppends", testConcurrentAuditAppends},
		{"ClusterKeys", testClusterKeys},
		{"ConcurrentClusterKeys", testConcurrentClusterKeys},
		{"ClusterCA", testClusterCA},
		{"ConcurrentClusterCA", testConcurrentClusterCA},
		{"SnapshotRecords", testSnapshotRecords},
		{"Volumes", testVolumes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// base is a time with nanoseconds in a zone that is not UTC, so a store that loses
// precision or mishandles zones shows it.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+5:30", 5*3600+1800))

// at returns base plus n seconds.
func at(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }

// newSandbox returns a running sandbox with every field set, created at(n).
func newSandbox(id, owner, name string, n int) *store.Sandbox {
	return &store.Sandbox{
		ID:           id,
		Name:         name,
		Owner:        owner,
		State:        "running",
		Image:        "python:3.12",
		ImageDigest:  "sha256:0123456789abcdef",
		Limits:       store.Limits{CPU: 1.5, Memory: 512 << 20, PIDs: 256, OpenFiles: 1024, Disk: 1 << 30},
		Env:          map[string]string{"LANG": "C.UTF-8"},
		Labels:       map[string]string{"team": "red"},
		Generation:   1,
		UIDBase:      100000,
		CreatedAt:    at(n),
		UpdatedAt:    at(n),
		LastActivity: at(n).Add(time.Nanosecond),
		ExpiresAt:    at(n).Add(8 * time.Hour),
		IdleSuspend:  10 * time.Minute,
		TTL:          24 * time.Hour,
		Extra:        json.RawMessage(`{"note":"hello","n":[1,2]}`),
	}
}

// newOperation returns a pending operation with every field set, created at(n).
func newOperation(id, owner, key string, n int) *store.Operation {
	return &store.Operation{
		ID:             id,
		Kind:           "create",
		Owner:          owner,
		SandboxID:      "sb_" + id,
		State:          store.OpPending,
		IdempotencyKey: key,
		RequestHash:    "sha256:feed",
		CreatedAt:      at(n),
		UpdatedAt:      at(n),
	}
}

// newEvent returns an event of sandbox id at(n).
func newEvent(sandboxID, typ string, n int) *store.Event {
	return &store.Event{
		SandboxID:  sandboxID,
		Generation: 1,
		Type:       typ,
		Cause:      "test",
		Data:       json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Time:       at(n),
	}
}

// ok fails the test at once when err is not nil.
func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: got error %v, want none", what, err)
	}
}

// isErr fails the test at once unless err is of class want.
func isErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %q", what, err, want)
	}
}

// same fails the test when got and want differ in any field (see diff).
func same(t *testing.T, got, want any, what string) {
	t.Helper()
	if d := diff(got, want); d != "" {
		t.Errorf("%s differs:%s", what, d)
	}
}

// diff returns one line per field in which got and want (pointers to, or values of,
// one struct type) differ, or "" when they match. Times compare with Equal, JSON by
// value, and a nil map equals an empty one.
func diff(got, want any) string {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	if gv.Kind() == reflect.Pointer {
		if gv.IsNil() || wv.IsNil() {
			if gv.IsNil() && wv.IsNil() {
				return ""
			}
			return fmt.Sprintf("\n\tgot %v, want %v", got, want)
		}
		gv, wv = gv.Elem(), wv.Elem()
	}
	var b strings.Builder
	for i := range gv.NumField() {
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !equalField(g, w) {
			fmt.Fprintf(&b, "\n\t%s: got %s, want %s", gv.Type().Field(i).Name, show(g), show(w))
		}
	}
	return b.String()
}

func equalField(g, w any) bool {
	switch g := g.(type) {
	case time.Time:
		return g.Equal(w.(time.Time))
	case json.RawMessage:
		return jsonEqual(g, w.(json.RawMessage))
	case map[string]string:
		w := w.(map[string]string)
		return len(g) == len(w) && (len(g) == 0 || reflect.DeepEqual(g, w))
	}
	return reflect.DeepEqual(g, w)
}

func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

func show(v any) string {
	switch v := v.(type) {
	case json.RawMessage:
		return fmt.Sprintf("%q", string(v))
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%+v", v)
}

// sandboxIDs returns the ids of sbs in order.
func sandboxIDs(sbs []*store.Sandbox) []string {
	ids := make([]string, 0, len(sbs))
	for _, sb := range sbs {
		ids = append(ids, sb.ID)
	}
	return ids
}

// sameIDs fails the test unless got lists exactly want, in order.
func sameIDs(t *testing.T, got, want []string, what string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got ids %v, want %v", what, got, want)
	}
}
