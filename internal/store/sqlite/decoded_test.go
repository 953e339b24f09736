package sqlite

import (
	"fmt"
	"testing"

	"github.com/airlockhq/airlock/internal/store"
)

// The records a list keeps decoded are bounded by the bytes of their documents, not
// only by their count: one record's environment may be megabytes, and a deleted
// record's stays until the cache starts afresh.
func TestDecodedBoundedInBytes(t *testing.T) {
	var d decoded
	const size = 2 << 20
	for i := range 200 {
		d.put(&store.Sandbox{ID: fmt.Sprintf("sb_%d", i), Version: 1}, size)
		if d.bytes > maxDecodedBytes {
			t.Fatalf("after %d records of %d bytes, %d bytes kept; at most %d", i+1, size, d.bytes, maxDecodedBytes)
		}
	}
	sum := 0
	for _, k := range d.m {
		sum += k.size
	}
	if sum != d.bytes {
		t.Errorf("the count says %d bytes, the records kept hold %d", d.bytes, sum)
	}
	last := "sb_199"
	if d.get(last, 1) == nil {
		t.Errorf("the last record put is not kept")
	}
	d.put(&store.Sandbox{ID: last, Version: 2}, 10)
	d.forget("sb_198")
	sum = 0
	for _, k := range d.m {
		sum += k.size
	}
	if sum != d.bytes {
		t.Errorf("after a replace and a forget the count says %d bytes, the records kept hold %d", d.bytes, sum)
	}
}
