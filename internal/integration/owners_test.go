package integration

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestOwnersCannotReachEachOther checks snapshots, operations and ports across two
// owners on TCP tokens: the other owner can neither see nor change them, by id or by
// name, and nothing it tries changes the owner's resources.
func TestOwnersCannotReachEachOther(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"alice", "bob"}})
	alice, bob := n.As(t, "alice"), n.As(t, "bob")
	created, err := alice.Create(background, api.CreateSandboxRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	sb := created.Sandbox
	if _, err := bob.Create(background, api.CreateSandboxRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}

	// Operations.
	if _, err := alice.Operation(background, created.Operation.ID); err != nil {
		t.Fatalf("owner reads its own operation: %v", err)
	}
	_, err = bob.Operation(background, created.Operation.ID)
	wantAPIError(t, "another owner reads the operation", err, 404, "not_found")

	// Snapshots.
	snap, err := alice.Snapshot(background, "a", map[string]string{"who": "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := snap.Snapshot.ID
	_, err = bob.GetSnapshot(background, id)
	wantAPIError(t, "another owner gets the snapshot", err, 404, "not_found")
	if list, err := bob.Snapshots(background, ""); err != nil || slices.ContainsFunc(list, func(s api.Snapshot) bool { return s.ID == id }) {
		t.Errorf("another owner's snapshot list: %v, %d entries; want no error and not the owner's snapshot", err, len(list))
	}
	_, err = bob.Snapshots(background, sb.ID)
	wantAPIError(t, "another owner lists the sandbox's snapshots by its id", err, 404, "not_found")
	wantAPIError(t, "another owner deletes the snapshot", bob.DeleteSnapshot(background, id), 404, "not_found")
	_, err = bob.Fork(background, id, api.ForkRequest{Name: "stolen"})
	wantAPIError(t, "another owner forks the snapshot", err, 404, "not_found")
	_, err = bob.Fork(background, sb.ID, api.ForkRequest{Name: "stolen2"})
	wantAPIError(t, "another owner forks the sandbox by its id", err, 404, "not_found")
	if _, err := bob.Suspend(background, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = bob.Restore(background, "b", api.RestoreRequest{Snapshot: id})
	wantAPIError(t, "another owner restores the snapshot into its own sandbox", err, 404, "not_found")
	_, err = bob.Snapshot(background, sb.ID, nil)
	wantAPIError(t, "another owner snapshots the sandbox by its id", err, 404, "not_found")
	if got, err := alice.GetSnapshot(background, id); err != nil || got.Labels["who"] != "alice" {
		t.Errorf("the owner's snapshot after the other's attempts: %v, %+v; want it unchanged", err, got)
	}

	// Ports.
	p, err := alice.ExposePort(background, "a", 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.Ports(background, sb.ID)
	wantAPIError(t, "another owner lists the ports", err, 404, "not_found")
	_, err = bob.ExposePort(background, sb.ID, 8001, true)
	wantAPIError(t, "another owner exposes a port", err, 404, "not_found")
	wantAPIError(t, "another owner closes the port", bob.ClosePort(background, sb.ID, 8000), 404, "not_found")
	if ports, err := alice.Ports(background, "a"); err != nil || len(ports) != 1 || ports[0].Token != p.Token || ports[0].Public {
		t.Errorf("the owner's ports after the other's attempts: %v, %+v; want only port 8000, private, same token", err, ports)
	}
	if list, err := bob.List(background, client.ListOptions{}); err != nil || len(list) != 1 || list[0].Name != "b" {
		t.Errorf("another owner's sandbox list: %v, %+v; want only its own sandbox b", err, list)
	}

	ownersKeepTheirEvents(t, n, alice, bob, sb.ID)
}

// ownersKeepTheirEvents checks events and egress records across two owners: bob cannot
// list alice's by her sandbox's id, his own event list holds none of hers, and a flood
// of events of his sandbox does not push hers out of her event list.
func ownersKeepTheirEvents(t *testing.T, n *testenv.Node, alice, bob *client.Client, aliceID string) {
	t.Helper()
	bobSB, err := bob.Get(background, "b")
	if err != nil {
		t.Fatal(err)
	}
	flood := make([]*store.Event, 2500)
	for i := range flood {
		flood[i] = &store.Event{SandboxID: bobSB.ID, Generation: 1, Type: "dns", Cause: "deny", Time: time.Now()}
	}
	if err := n.Store.AppendEvents(background, flood); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"Host": "private.example", "Port": 443, "Method": "CONNECT", "Reason": "not allowed"})
	if err := n.Store.AppendEvent(background, &store.Event{SandboxID: aliceID, Generation: 1, Type: "egress", Cause: "deny", Data: rec, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}

	_, err = bob.Events(background, aliceID, 0)
	wantAPIError(t, "another owner lists the sandbox's events by its id", err, 404, "not_found")
	_, err = bob.EgressLog(background, aliceID, 0)
	wantAPIError(t, "another owner reads the sandbox's egress records by its id", err, 404, "not_found")
	err = bob.FollowEvents(background, aliceID, 0, func(api.Event) error { return nil })
	wantAPIError(t, "another owner follows the sandbox's events by its id", err, 404, "not_found")
	var after int64
	for {
		evs, err := bob.Events(background, "", after)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.SandboxID == aliceID {
				t.Fatalf("another owner's event list holds the owner's event %d (%s)", ev.Seq, ev.Type)
			}
			after = ev.Seq
		}
	}

	evs, err := alice.Events(background, "", 0)
	if err != nil || !slices.ContainsFunc(evs, func(ev api.Event) bool { return ev.Type == "egress" }) {
		t.Errorf("the owner's event list after another owner's flood of %d events: %v, %d events; want its egress event", len(flood), err, len(evs))
	}
	recs, err := alice.EgressLog(background, "a", 0)
	if err != nil || len(recs) != 1 || recs[0].Host != "private.example" {
		t.Errorf("the owner's egress records: %v, %+v; want its one record", err, recs)
	}
}

// TestStatusShowsHostPathsToAdminsOnly checks that /v1/status names the state directory
// and host details to the unix socket's users only.
func TestStatusShowsHostPathsToAdminsOnly(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"alice"}})
	st, err := n.Client.Status(background)
	if err != nil || st.StateDir != n.Dir {
		t.Fatalf("administrator's status: %v, state_dir %q; want %q", err, st.StateDir, n.Dir)
	}
	st, err = n.As(t, "alice").Status(background)
	if err != nil {
		t.Fatal(err)
	}
	if st.StateDir != "" {
		t.Errorf("a TCP owner's status names the state directory %q; want it left out", st.StateDir)
	}
	for _, c := range st.Checks {
		if c.Detail != "" {
			t.Errorf("a TCP owner's status check %q has detail %q; want none", c.Name, c.Detail)
		}
	}
}

// TestAdministratorListsEveryOwner checks that root on the unix socket lists every
// owner's sandboxes (the SDK's AllOwners and airlock ls --all-owners, with an OWNER
// column), removes another owner's by the id the listing gives, and that an owner
// without the admin permission is refused such a listing.
func TestAdministratorListsEveryOwner(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"alice", "bob"}})
	alice, bob := n.As(t, "alice"), n.As(t, "bob")
	ids := map[string]string{}
	for owner, c := range map[string]*client.Client{"alice": alice, "bob": bob} {
		resp, err := c.Create(background, api.CreateSandboxRequest{Name: "work"})
		if err != nil {
			t.Fatal(err)
		}
		ids[owner] = resp.Sandbox.ID
	}
	list, err := n.Client.List(background, client.ListOptions{AllOwners: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, sb := range list {
		seen[sb.Owner] = sb.ID
	}
	if seen["alice"] != ids["alice"] || seen["bob"] != ids["bob"] || len(list) != 2 {
		t.Fatalf("root lists %+v; want alice's and bob's sandboxes %v, each with its owner", seen, ids)
	}
	out, err := exec.Command(testenv.Binary(t), "--socket", n.Socket, "ls", "--all-owners").CombinedOutput()
	if err != nil {
		t.Fatalf("airlock ls --all-owners: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "OWNER") {
		t.Fatalf("airlock ls --all-owners printed\n%s\nwant a header with OWNER and two sandboxes", out)
	}
	for _, owner := range []string{"alice", "bob"} {
		if !slices.ContainsFunc(lines[1:], func(l string) bool {
			f := strings.Fields(l)
			return len(f) > 2 && f[0] == owner && f[2] == ids[owner]
		}) {
			t.Errorf("airlock ls --all-owners printed\n%s\nwant %s's sandbox %s on a line of its own", out, owner, ids[owner])
		}
	}
	_, err = alice.List(background, client.ListOptions{AllOwners: true})
	wantAPIError(t, "alice lists every owner's sandboxes", err, 403, "permission_denied")

	if _, err := n.Client.Terminate(background, seen["bob"]); err != nil {
		t.Fatalf("root removes bob's sandbox by the listed id: %v", err)
	}
	if sb, err := bob.Get(background, "work"); err != nil || sb.State != "terminated" {
		t.Errorf("bob's sandbox after root removed it: %+v, %v", sb, err)
	}
	if sb, err := alice.Get(background, "work"); err != nil || sb.State != "running" {
		t.Errorf("alice's sandbox after root removed bob's: %+v, %v", sb, err)
	}
}
