package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// A list that reuses the records an earlier list decoded still shows every change:
// an update, a record removed and made again under the same id, and a caller's own
// change to a listed record, which stays its own. ViewSandboxes, which shows the kept
// records themselves, shows the same as ListSandboxes each time.
func TestListShowsChangesToKeptRecords(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	sb := &store.Sandbox{ID: "sb_1", Name: "a", Owner: "alice", State: "running", Labels: map[string]string{"k": "v"}, CreatedAt: now}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	list := func(what string) *store.Sandbox {
		t.Helper()
		var v []store.Sandbox // first, so the list copies what the view kept
		err := st.ViewSandboxes(ctx, store.SandboxFilter{Owner: "alice"}, func(sb *store.Sandbox) error {
			v = append(v, *sb)
			return nil
		})
		if err != nil || len(v) != 1 {
			t.Fatalf("%s: view = %d records, %v; want 1", what, len(v), err)
		}
		l, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"})
		if err != nil || len(l) != 1 {
			t.Fatalf("%s: list = %d records, %v; want 1", what, len(l), err)
		}
		if !reflect.DeepEqual(*l[0], v[0]) {
			t.Errorf("%s: view shows %+v, list %+v", what, v[0], *l[0])
		}
		return l[0]
	}
	first := list("first")
	first.Labels["k"], first.Name = "mine", "mine"
	if got := list("after the caller changed its copy"); got.Labels["k"] != "v" || got.Name != "a" {
		t.Errorf("a caller's change to a listed record showed in the next list: %+v", got)
	}
	sb.State = "suspended"
	if err := st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got := list("after an update"); got.State != "suspended" || got.Version != sb.Version {
		t.Errorf("after an update: state %s version %d, want suspended %d", got.State, got.Version, sb.Version)
	}
	// Made again, a record starts at version 1, as the one listed before it did.
	if err := st.DeleteSandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: "sb_1", Name: name, Owner: "alice", State: "running", CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if got := list("made again"); got.Name != name || got.Version != 1 {
			t.Errorf("a record removed and made again under its id lists as %q version %d, want %q version 1", got.Name, got.Version, name)
		}
		if err := st.DeleteSandbox(ctx, "sb_1"); err != nil {
			t.Fatal(err)
		}
	}
}

// A list of more records than one read of documents asks for, some decoded before at
// their version and some not (new, or changed since), lists each record once, in order,
// as it is stored.
func TestListReadsDocumentsOfRecordsNotKept(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n = 2*docBatch + 7
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var all []*store.Sandbox
	for i := range n {
		sb := &store.Sandbox{ID: fmt.Sprintf("sb_%05d", i), Name: fmt.Sprintf("s%d", i), Owner: "alice", State: "suspended",
			CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		all = append(all, sb)
		if i == n/2 { // the first half is decoded by this list, the rest is not
			if _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, i := range []int{0, 3, n / 2, n - 1} {
		all[i].Failure = "changed"
		if err := st.UpdateSandbox(ctx, all[i]); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 { // the second from the records the first decoded
		got, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"})
		if err != nil || len(got) != n {
			t.Fatalf("round %d: list = %d records, %v; want %d", round, len(got), err, n)
		}
		for i, sb := range got {
			if sb.ID != all[i].ID || sb.Version != all[i].Version || sb.Failure != all[i].Failure || sb.Name != all[i].Name {
				t.Fatalf("round %d: record %d lists as %s v%d %q, want %s v%d %q", round, i, sb.ID, sb.Version, sb.Failure,
					all[i].ID, all[i].Version, all[i].Failure)
			}
		}
	}
}

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
