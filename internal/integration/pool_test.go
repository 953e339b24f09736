package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// poolMembers lists the ids of pool name's ready members, from the node's store.
func poolMembers(t testing.TB, n *testenv.Node, name string) []string {
	t.Helper()
	list, err := n.Store.ListSandboxes(context.Background(), store.SandboxFilter{Owner: store.PoolOwner(name), States: []store.State{"running"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	return ids
}

// waitPoolReady waits until pool name has want ready members and returns them.
func waitPoolReady(t testing.TB, n *testenv.Node, name string, want int) []string {
	t.Helper()
	var ids []string
	err := retry(2*time.Minute, func() error {
		if ids = poolMembers(t, n, name); len(ids) < want {
			return fmt.Errorf("%d of %d members ready", len(ids), want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pool %s: %v", name, err)
	}
	return ids
}

// setPool sets a pool through the API and removes it (and its members) when the test ends.
func setPool(t testing.TB, n *testenv.Node, name string, req api.PoolRequest) {
	t.Helper()
	if _, err := n.Client.SetPool(context.Background(), name, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Client.DeletePool(context.Background(), name); err != nil {
			t.Errorf("pool rm %s: %v", name, err)
		}
		if left := poolMembers(t, n, name); len(left) > 0 {
			t.Errorf("members left after pool rm: %v", left)
		}
	})
}

// TestPoolClaim: a create with the node's defaults claims a ready member of a pool of
// the default image, which then is the caller's sandbox in every way (name as host
// name, labels, environment, a secret bound after, the session credential's identity),
// and no member is ever handed out twice.
func TestPoolClaim(t *testing.T) {
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Network: true, Owners: []string{"alice"}})
	ctx := context.Background()
	setPool(t, n, "warm", api.PoolRequest{Size: 2})
	members := waitPoolReady(t, n, "warm", 2)
	alice := n.As(t, "alice")
	if list, err := alice.List(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("alice's list before any create: %d sandboxes (%v); members must be hidden", len(list), err)
	}

	resp, err := alice.Create(ctx, api.CreateSandboxRequest{Name: "pooled", Labels: map[string]string{"team": "x"}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := resp.Sandbox
	if !slices.Contains(members, sb.ID) {
		t.Fatalf("create got %s, not one of the ready members %v", sb.ID, members)
	}
	if sb.Owner != "alice" || sb.Name != "pooled" || sb.Labels["team"] != "x" {
		t.Errorf("claimed sandbox = %+v; want alice's pooled with label team=x", sb)
	}
	value := secretValue("sk-")
	if _, err := alice.CreateSecret(ctx, api.CreateSecretRequest{Name: "key", Type: "token", Value: value}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.BindSecret(ctx, "key", api.BindSecretRequest{Sandbox: "pooled", Target: "API_KEY", Delivery: "env"}); err != nil {
		t.Fatal(err)
	}
	res, err := alice.Exec(ctx, "pooled", api.ExecRequest{Shell: `hostname; echo "$GREETING"; echo "$API_KEY"; curl -sS --fail-with-body -H "Authorization: Bearer $(cat /run/airlock/session/token)" http://airlock.internal/v1/whoami`, Timeout: execTimeout})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(res.Stdout, "\n", 4)
	if res.ExitCode != 0 || len(lines) < 4 {
		t.Fatalf("exec in the claimed sandbox: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if lines[0] != "pooled" || lines[1] != "hi" || lines[2] != value {
		t.Errorf("host name, GREETING, API_KEY = %q, %q, %q; want pooled, hi and the secret's value", lines[0], lines[1], lines[2])
	}
	var who api.WhoAmI
	if err := json.Unmarshal([]byte(lines[3]), &who); err != nil || who.User != "alice" || who.Sandbox != sb.ID {
		t.Errorf("the session credential of the claimed sandbox is %q (%v); want alice's, of %s", lines[3], err, sb.ID)
	}

	// The member now is alice's: the pool refills without it, and it is never handed out
	// again, not even after it ends.
	if _, err := alice.Terminate(ctx, "pooled"); err != nil {
		t.Fatal(err)
	}
	refilled := waitPoolReady(t, n, "warm", 2)
	if slices.Contains(refilled, sb.ID) {
		t.Fatalf("the claimed sandbox %s is a member again", sb.ID)
	}
	for i, name := range []string{"second", "third", "fourth"} {
		resp, err := alice.Create(ctx, api.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Sandbox.ID == sb.ID {
			t.Fatalf("create %d got the claimed and terminated sandbox %s again", i, sb.ID)
		}
	}
	pools, err := n.Client.Pools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Hits < 3 || pools[0].Size != 2 {
		t.Errorf("pool ls = %+v (%v); want warm of size 2 with at least 3 hits", pools, err)
	}
}

// TestPoolSurvivesDaemonRestart: a pool set with the CLI is kept in the store, and its
// members, running when the daemon is killed, are reattached by the next daemon (the
// same containers, none rebuilt) and claimed by its creates.
func TestPoolSurvivesDaemonRestart(t *testing.T) {
	d := startDaemonB(t)
	d.must("pool", "set", "warm", "--size", "2")
	t.Cleanup(func() { d.airlock("pool", "rm", "warm") })
	ready := func() api.Pool {
		var pools []api.Pool
		if err := json.Unmarshal([]byte(d.must("pool", "ls", "-o", "json")), &pools); err != nil || len(pools) != 1 {
			t.Fatalf("pool ls: %v %+v", err, pools)
		}
		return pools[0]
	}
	if err := retry(2*time.Minute, func() error {
		if p := ready(); p.Ready < 2 {
			return fmt.Errorf("%d of 2 members ready", p.Ready)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := d.runcContainers()
	if len(before) != 2 {
		t.Fatalf("containers with a full pool of 2: %v", before)
	}
	d.stop(syscall.SIGKILL)
	d.start()
	if p := ready(); p.Ready != 2 || p.Size != 2 {
		t.Errorf("pool after a restart = %+v; want size 2, both members ready", p)
	}
	if after := d.runcContainers(); !slices.Equal(slices.Sorted(slices.Values(after)), slices.Sorted(slices.Values(before))) {
		t.Errorf("containers after a restart = %v; want the members reattached, %v", after, before)
	}
	d.must("create", "x", "--label", "k=v")
	sb := d.get("x")
	if !slices.Contains(before, "airlock-"+sb.ID) {
		t.Errorf("create after the restart got %s, not one of the reattached members %v", sb.ID, before)
	}
	if p := ready(); p.Hits != 1 {
		t.Errorf("pool after a claim = %+v; want 1 hit", p)
	}
}
