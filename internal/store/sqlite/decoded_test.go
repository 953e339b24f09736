package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// A list that reuses the records an earlier list decoded still shows every change:
// an update, a record removed and made again under the same id, and a caller's own
// change to a listed record, which stays its own.
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
		l, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"})
		if err != nil || len(l) != 1 {
			t.Fatalf("%s: list = %d records, %v; want 1", what, len(l), err)
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
