package e2b_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/store"
)

// TestControlPlaneCreateClaimsAPoolMember: E2B's create of the base template, with no
// change on its side, is served by a warm pool of the node's defaults, and the claimed
// sandbox carries the create's metadata.
func TestControlPlaneCreateClaimsAPoolMember(t *testing.T) {
	f, alice, _ := newFixture(t)
	ctx := context.Background()
	m, st := f.node.Manager, f.node.Store
	if _, err := m.SetPool(ctx, manager.Call{Owner: "local", Admin: true}, manager.PoolRequest{Name: "warm", Size: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.DeletePool(context.Background(), "warm") })
	var members []*store.Sandbox
	for deadline := time.Now().Add(30 * time.Second); len(members) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		members, _ = st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.PoolOwner("warm"), States: []store.State{manager.Running}})
	}
	if len(members) == 0 {
		t.Fatal("the pool has no ready member after 30s")
	}
	code, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base","metadata":{"team":"a"}}`)
	f.want("create", code, body, 201)
	var made struct{ SandboxID string }
	json.Unmarshal(body, &made)
	if !slices.ContainsFunc(members, func(sb *store.Sandbox) bool { return sb.ID == made.SandboxID }) {
		t.Fatalf("E2B create got %s, not the ready member %s", made.SandboxID, members[0].ID)
	}
	sb, err := st.GetSandbox(ctx, made.SandboxID)
	if err != nil || sb.Owner != "alice" || sb.Labels["team"] != "a" {
		t.Errorf("claimed sandbox = %+v (%v); want alice's with metadata team=a", sb, err)
	}
}
