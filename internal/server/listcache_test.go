package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/manager"
)

// The JSON kept of listed records stays within maxEncodedBytes however many large
// records are listed, deleted and made again: a deleted record's JSON is kept until
// the cache starts afresh, and one record's environment may be megabytes, so a count
// of records alone does not bound it.
func TestListCacheBoundedInBytes(t *testing.T) {
	var e encodedSandboxes
	env := map[string]string{}
	for i := range 64 {
		env[fmt.Sprintf("BIG%d", i)] = strings.Repeat("x", 32<<10-8)
	}
	now := time.Now()
	for i := range 200 {
		sb := &manager.Sandbox{ID: fmt.Sprintf("sb_%d", i), Owner: "alice", Version: 1, Env: env, CreatedAt: now, UpdatedAt: now}
		if _, err := e.json(sb); err != nil {
			t.Fatal(err)
		}
		if e.bytes > maxEncodedBytes {
			t.Fatalf("after %d records of 2 MiB the cache keeps %d bytes, more than %d", i+1, e.bytes, maxEncodedBytes)
		}
	}
	n := 0
	for _, k := range e.m {
		n += len(k.json)
	}
	if n != e.bytes {
		t.Errorf("the cache counts %d bytes and keeps %d", e.bytes, n)
	}
	// A record listed again unchanged is the one kept.
	sb := &manager.Sandbox{ID: "sb_199", Owner: "alice", Version: 1, Env: env, CreatedAt: now, UpdatedAt: now}
	a, _ := e.json(sb)
	b, _ := e.json(sb)
	if &a[0] != &b[0] {
		t.Error("an unchanged record was encoded again")
	}
}
