package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

const terminated = "terminated"

// terminate moves sb to the terminated state through UpdateSandbox.
func terminate(t *testing.T, s store.Store, sb *store.Sandbox) {
	t.Helper()
	sb.State = terminated
	ok(t, s.UpdateSandbox(t.Context(), sb), "UpdateSandbox(terminate "+sb.ID+")")
}

func testSandboxRoundTrip(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	sb.Version = 7
	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	if sb.Version != 1 {
		t.Errorf("CreateSandbox: got Version %d, want 1", sb.Version)
	}
	want := newSandbox("sb_1", "alice", "web", 0)
	want.Version = 1

	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	same(t, got, want, "GetSandbox")

	got, err = s.GetSandboxByName(ctx, "alice", "web")
	ok(t, err, "GetSandboxByName")
	same(t, got, want, "GetSandboxByName")

	list, err := s.ListSandboxes(ctx, store.SandboxFilter{})
	ok(t, err, "ListSandboxes")
	if len(list) != 1 {
		t.Fatalf("ListSandboxes: got %d sandboxes, want 1", len(list))
	}
	same(t, list[0], want, "ListSandboxes[0]")

	// The store hands out copies: changing what it returned changes nothing stored.
	got.Labels["team"] = "blue"
	again, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	same(t, again, want, "GetSandbox after changing a returned record")
}

func testCreateSandboxDuplicateID(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_1", "alice", "one", 0)), "CreateSandbox")
	err := s.CreateSandbox(ctx, newSandbox("sb_1", "bob", "two", 1))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateSandbox with a used id")
	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	if got.Owner != "alice" || got.Name != "one" {
		t.Errorf("GetSandbox after a refused create: got %s/%s, want alice/one", got.Owner, got.Name)
	}
}

func testNameUniquePerOwner(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_1", "alice", "web", 0)), "CreateSandbox(alice/web)")

	for _, state := range []store.State{"creating", "running", "suspended", "failed", "terminating"} {
		sb := newSandbox("sb_2", "alice", "web", 1)
		sb.State = state
		err := s.CreateSandbox(ctx, sb)
		isErr(t, err, errdefs.ErrAlreadyExists, "CreateSandbox(alice/web, "+string(state)+") beside a live one")
	}

	ok(t, s.CreateSandbox(ctx, newSandbox("sb_3", "bob", "web", 2)), "CreateSandbox(bob/web)")
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_4", "alice", "api", 3)), "CreateSandbox(alice/api)")

	// A live sandbox cannot be renamed onto a live name either.
	api, err := s.GetSandbox(ctx, "sb_4")
	ok(t, err, "GetSandbox")
	api.Name = "web"
	isErr(t, s.UpdateSandbox(ctx, api), errdefs.ErrAlreadyExists, "UpdateSandbox renaming alice/api to alice/web")
}

func testNameReusedAfterTerminate(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	first := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, first), "CreateSandbox(first)")
	terminate(t, s, first)

	second := newSandbox("sb_2", "alice", "web", 1)
	ok(t, s.CreateSandbox(ctx, second), "CreateSandbox(second) after the first was terminated")

	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox(first)")
	if got.State != terminated {
		t.Errorf("GetSandbox(first): got state %q, want %q", got.State, terminated)
	}
	err = s.CreateSandbox(ctx, newSandbox("sb_3", "alice", "web", 2))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateSandbox(third) beside the live second")

	// A sandbox created already terminated takes no name.
	tomb := newSandbox("sb_4", "alice", "web", 3)
	tomb.State = terminated
	ok(t, s.CreateSandbox(ctx, tomb), "CreateSandbox(terminated) beside the live second")
}

func testRevivingTakesTheName(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	first := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, first), "CreateSandbox(first)")
	terminate(t, s, first)
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_2", "alice", "web", 1)), "CreateSandbox(second)")

	first.State = "running"
	err := s.UpdateSandbox(ctx, first)
	isErr(t, err, errdefs.ErrAlreadyExists, "UpdateSandbox moving the terminated first back to running")
	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox(first)")
	if got.State != terminated || got.Version != 2 {
		t.Errorf("GetSandbox(first) after a refused update: got state %q version %d, want %q version 2",
			got.State, got.Version, terminated)
	}
}

func testGetSandboxByName(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	_, err := s.GetSandboxByName(ctx, "alice", "web")
	isErr(t, err, errdefs.ErrNotFound, "GetSandboxByName on an empty store")

	first := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, first), "CreateSandbox(first)")
	terminate(t, s, first)
	second := newSandbox("sb_2", "alice", "web", 1)
	ok(t, s.CreateSandbox(ctx, second), "CreateSandbox(second)")
	terminate(t, s, second)

	got, err := s.GetSandboxByName(ctx, "alice", "web")
	ok(t, err, "GetSandboxByName with two terminated")
	if got.ID != "sb_2" {
		t.Errorf("GetSandboxByName with two terminated: got %s, want the most recent, sb_2", got.ID)
	}

	// The live one wins even when a terminated one is more recent.
	first.State = "running"
	ok(t, s.UpdateSandbox(ctx, first), "UpdateSandbox(first back to running)")
	got, err = s.GetSandboxByName(ctx, "alice", "web")
	ok(t, err, "GetSandboxByName with one live")
	same(t, got, first, "GetSandboxByName with one live")

	_, err = s.GetSandboxByName(ctx, "bob", "web")
	isErr(t, err, errdefs.ErrNotFound, "GetSandboxByName of another owner")
	_, err = s.GetSandboxByName(ctx, "alice", "api")
	isErr(t, err, errdefs.ErrNotFound, "GetSandboxByName of an unknown name")
}

func testGetSandboxNotFound(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	_, err := s.GetSandbox(ctx, "sb_missing")
	isErr(t, err, errdefs.ErrNotFound, "GetSandbox(sb_missing)")
}

func testListSandboxes(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	// Inserted out of creation order, so the order of the results must come from
	// CreatedAt and not from insertion.
	for _, sb := range []struct {
		id, owner string
		state     store.State
		created   int
		labels    map[string]string
	}{
		{"sb_a", "alice", "running", 3, map[string]string{"team": "red", "app.kubernetes.io/name": "web"}},
		{"sb_b", "alice", "suspended", 1, map[string]string{"team": "blue"}},
		{"sb_c", "alice", terminated, 2, map[string]string{"team": "red"}},
		{"sb_d", "bob", "running", 0, map[string]string{"team": "red", `we"ird $.key`: "v"}},
		{"sb_e", "bob", "failed", 4, nil},
	} {
		rec := newSandbox(sb.id, sb.owner, sb.id, sb.created)
		rec.State, rec.Labels = sb.state, sb.labels
		rec.Node = map[string]string{"sb_a": "node-a", "sb_b": "node-b", "sb_d": "node-a"}[sb.id]
		ok(t, s.CreateSandbox(ctx, rec), "CreateSandbox("+sb.id+")")
	}
	// A record that moves to another node is listed under that node only.
	moved, err := s.GetSandbox(ctx, "sb_e")
	ok(t, err, "GetSandbox(sb_e)")
	moved.Node = "node-b"
	ok(t, s.UpdateSandbox(ctx, moved), "UpdateSandbox(sb_e)")

	tests := []struct {
		name   string
		filter store.SandboxFilter
		want   []string
	}{
		{"all", store.SandboxFilter{}, []string{"sb_d", "sb_b", "sb_c", "sb_a", "sb_e"}},
		{"owner", store.SandboxFilter{Owner: "alice"}, []string{"sb_b", "sb_c", "sb_a"}},
		{"unknown owner", store.SandboxFilter{Owner: "carol"}, nil},
		{"one state", store.SandboxFilter{States: []store.State{"running"}}, []string{"sb_d", "sb_a"}},
		{"two states", store.SandboxFilter{States: []store.State{"suspended", terminated}}, []string{"sb_b", "sb_c"}},
		{"owner and state", store.SandboxFilter{Owner: "bob", States: []store.State{"running"}}, []string{"sb_d"}},
		{"one label", store.SandboxFilter{Labels: map[string]string{"team": "red"}}, []string{"sb_d", "sb_c", "sb_a"}},
		{"two labels", store.SandboxFilter{Labels: map[string]string{"team": "red", "app.kubernetes.io/name": "web"}}, []string{"sb_a"}},
		{"label key with quotes and dots", store.SandboxFilter{Labels: map[string]string{`we"ird $.key`: "v"}}, []string{"sb_d"}},
		{"label value differs", store.SandboxFilter{Labels: map[string]string{"team": "Red"}}, nil},
		{"empty label value needs the key", store.SandboxFilter{Labels: map[string]string{"team": ""}}, nil},
		{"node, with records from before nodes were named", store.SandboxFilter{Node: "node-a"}, []string{"sb_d", "sb_c", "sb_a"}},
		{"other node", store.SandboxFilter{Node: "node-b"}, []string{"sb_b", "sb_c", "sb_e"}},
		{"node and state", store.SandboxFilter{Node: "node-b", States: []store.State{"failed"}}, []string{"sb_e"}},
		{"label and state and owner", store.SandboxFilter{
			Owner: "alice", States: []store.State{"running", terminated}, Labels: map[string]string{"team": "red"},
		}, []string{"sb_c", "sb_a"}},
	}
	for _, tt := range tests {
		got, err := s.ListSandboxes(ctx, tt.filter)
		ok(t, err, "ListSandboxes("+tt.name+")")
		sameIDs(t, sandboxIDs(got), tt.want, "ListSandboxes("+tt.name+")")
	}
}

func testUpdateSandbox(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")

	sb.State = "suspended"
	sb.Generation = 2
	sb.Labels = map[string]string{"team": "blue", "tier": "gold"}
	sb.LastActivity = at(60)
	sb.Failure = ""
	sb.Extra = []byte(`{"note":"changed"}`)
	ok(t, s.UpdateSandbox(ctx, sb), "UpdateSandbox")
	if sb.Version != 2 {
		t.Errorf("UpdateSandbox: got Version %d, want 2", sb.Version)
	}
	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	same(t, got, sb, "GetSandbox after UpdateSandbox")

	// An update from the record just read succeeds too, and bumps again.
	got.State = "running"
	ok(t, s.UpdateSandbox(ctx, got), "UpdateSandbox from a fresh read")
	if got.Version != 3 {
		t.Errorf("second UpdateSandbox: got Version %d, want 3", got.Version)
	}
	again, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	same(t, again, got, "GetSandbox after the second UpdateSandbox")
}

func testUpdateSandboxVersionConflict(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	stale := *sb
	sb.State = "suspended"
	ok(t, s.UpdateSandbox(ctx, sb), "UpdateSandbox")

	stale.State = "failed"
	isErr(t, s.UpdateSandbox(ctx, &stale), errdefs.ErrVersionConflict, "UpdateSandbox at a stale version")
	if stale.Version != 1 {
		t.Errorf("refused UpdateSandbox: got Version %d, want it left at 1", stale.Version)
	}
	ahead := *sb
	ahead.Version = 99
	isErr(t, s.UpdateSandbox(ctx, &ahead), errdefs.ErrVersionConflict, "UpdateSandbox at a future version")

	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	same(t, got, sb, "GetSandbox after refused updates")
}

func testUpdateSandboxNotFound(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	sb.Version = 1
	isErr(t, s.UpdateSandbox(ctx, sb), errdefs.ErrNotFound, "UpdateSandbox of a sandbox never created")

	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	ok(t, s.DeleteSandbox(ctx, "sb_1"), "DeleteSandbox")
	isErr(t, s.UpdateSandbox(ctx, sb), errdefs.ErrNotFound, "UpdateSandbox of a deleted sandbox")
}

func testDeleteSandbox(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_1", "alice", "web", 0)), "CreateSandbox(sb_1)")
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_2", "alice", "api", 1)), "CreateSandbox(sb_2)")
	ok(t, s.DeleteSandbox(ctx, "sb_1"), "DeleteSandbox(sb_1)")

	_, err := s.GetSandbox(ctx, "sb_1")
	isErr(t, err, errdefs.ErrNotFound, "GetSandbox of a deleted sandbox")
	_, err = s.GetSandboxByName(ctx, "alice", "web")
	isErr(t, err, errdefs.ErrNotFound, "GetSandboxByName of a deleted sandbox")
	list, err := s.ListSandboxes(ctx, store.SandboxFilter{})
	ok(t, err, "ListSandboxes")
	sameIDs(t, sandboxIDs(list), []string{"sb_2"}, "ListSandboxes after DeleteSandbox")

	isErr(t, s.DeleteSandbox(ctx, "sb_1"), errdefs.ErrNotFound, "DeleteSandbox twice")
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_3", "alice", "web", 2)), "CreateSandbox with the deleted one's name")
}

// A list read page by page, oldest or newest first, while sandboxes are created and
// deleted between pages, never repeats one and never skips one that existed throughout.
func testListSandboxesPaged(t *testing.T, open func(t *testing.T) store.Store) {
	for _, desc := range []bool{false, true} {
		t.Run(fmt.Sprintf("desc=%v", desc), func(t *testing.T) { listPaged(t, open(t), desc) })
	}
}

func listPaged(t *testing.T, s store.Store, desc bool) {
	ctx := t.Context()
	// Pairs share a creation time, so the order within them comes from ids; ids are
	// inserted out of order.
	throughout := map[string]bool{}
	for i := 29; i >= 0; i-- {
		id := fmt.Sprintf("sb_%02d", i)
		ok(t, s.CreateSandbox(ctx, newSandbox(id, "alice", id, i/2)), "CreateSandbox("+id+")")
		throughout[id] = true
		other := fmt.Sprintf("sb_bob_%02d", i)
		ok(t, s.CreateSandbox(ctx, newSandbox(other, "bob", other, i/2)), "CreateSandbox("+other+")")
	}
	f := store.SandboxFilter{Owner: "alice", Limit: 4, Desc: desc}
	seen := map[string]bool{}
	dir := 1
	if desc {
		dir = -1
	}
	var last *store.Sandbox
	for page := 0; ; page++ {
		list, err := s.ListSandboxes(ctx, f)
		ok(t, err, "ListSandboxes(page)")
		if len(list) > f.Limit {
			t.Fatalf("page %d: got %d sandboxes, limit %d", page, len(list), f.Limit)
		}
		for _, sb := range list {
			if sb.Owner != "alice" {
				t.Errorf("page %d lists %s of %s", page, sb.ID, sb.Owner)
			}
			if seen[sb.ID] {
				t.Errorf("page %d repeats %s", page, sb.ID)
			}
			seen[sb.ID] = true
			if last != nil && (sb.CreatedAt.Compare(last.CreatedAt)*dir < 0 || sb.CreatedAt.Equal(last.CreatedAt) && strings.Compare(sb.ID, last.ID)*dir <= 0) {
				t.Errorf("page %d: %s comes after %s", page, sb.ID, last.ID)
			}
			last = sb
		}
		if len(list) < f.Limit {
			break
		}
		if page > 20 {
			t.Fatal("paging does not end")
		}
		// Between pages: the place's own sandbox goes, one not yet listed goes, and
		// new ones come both before and after the place.
		end := list[len(list)-1]
		ok(t, s.DeleteSandbox(ctx, end.ID), "DeleteSandbox("+end.ID+")")
		later := fmt.Sprintf("sb_%02d", 29-page)
		if desc {
			later = fmt.Sprintf("sb_%02d", page)
		}
		if !seen[later] {
			if _, err := s.GetSandbox(ctx, later); err == nil {
				ok(t, s.DeleteSandbox(ctx, later), "DeleteSandbox("+later+")")
			}
			delete(throughout, later)
		}
		for _, n := range []int{-1, 20 + page} {
			id := fmt.Sprintf("sb_new_%d_%d", page, n)
			ok(t, s.CreateSandbox(ctx, newSandbox(id, "alice", id, n)), "CreateSandbox("+id+")")
		}
		f.After = store.PlaceOf(end)
	}
	for id := range throughout {
		if !seen[id] {
			t.Errorf("paging skipped %s, which existed throughout", id)
		}
	}
}
