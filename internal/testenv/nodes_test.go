package testenv

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// TestTwoNodesShareMembership: two nodes on one PostgreSQL database, with one keys_dir,
// each hold a lease and list each other; each takes API writes through its own API (a
// create and an exec, and a secret made on one reaching an exec on the other's sandbox),
// and the one audit chain they write together verifies from either; a sandbox names the
// node it was created on; a drain set through one node reaches the other at its next
// renewal and stops its creates; and a third node cannot start under a live node's name.
func TestTwoNodesShareMembership(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).CreateDatabase(t)
	keys := t.TempDir()
	if err := os.Chmod(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	a := NewFakeNode(t, FakeOptions{StoreDSN: dsn, NodeName: "node-a", KeysDir: keys, SecretDelivery: true})
	b := NewFakeNode(t, FakeOptions{StoreDSN: dsn, NodeName: "node-b", KeysDir: keys, SecretDelivery: true})

	nodes, err := a.Manager.Nodes(ctx)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	if len(nodes) != 2 || nodes[0].Name != "node-a" || !nodes[0].Self || nodes[1].Name != "node-b" || nodes[1].Self ||
		nodes[0].State != "ready" || nodes[1].State != "ready" {
		t.Fatalf("Nodes from node-a = %+v; want node-a (itself) and node-b, both ready", nodes)
	}
	for _, n := range []*FakeNode{a, b} {
		name := "on-" + strings.TrimPrefix(n.Config.Node.Name, "node-")
		resp, err := n.Client.Create(ctx, api.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatalf("create on %s: %v", n.Config.Node.Name, err)
		}
		if resp.Sandbox.Node != n.Config.Node.Name {
			t.Fatalf("the sandbox made on %s names node %q", n.Config.Node.Name, resp.Sandbox.Node)
		}
		if res, err := n.Client.Exec(ctx, name, api.ExecRequest{Argv: []string{"echo", "hi"}}); err != nil || res.Stdout != "hi\n" {
			t.Fatalf("exec on %s: %+v, %v; want hi", n.Config.Node.Name, res, err)
		}
	}
	// A secret sealed by node-a, opened by node-b for its own sandbox: one secret key.
	// (It is bound through node-b: a binding made on another node is kept, but the
	// sandbox's node delivers it only once something there refreshes the sandbox.)
	if _, err := a.Client.CreateSecret(ctx, api.CreateSecretRequest{Name: "db", Type: "password", Value: "s3cret-from-a"}); err != nil {
		t.Fatalf("create a secret on node-a: %v", err)
	}
	if _, err := b.Client.BindSecret(ctx, "db", api.BindSecretRequest{Sandbox: "on-b", Target: "DB_PASS", Delivery: "env"}); err != nil {
		t.Fatalf("bind it to node-b's sandbox: %v", err)
	}
	if res, err := b.Client.Exec(ctx, "on-b", api.ExecRequest{Argv: []string{"sh", "-c", "echo $DB_PASS"}}); err != nil || res.Stdout != "s3cret-from-a\n" {
		t.Fatalf("exec on node-b's sandbox: %+v, %v; want the secret node-a sealed in its env", res, err)
	}
	for _, n := range []*FakeNode{a, b} {
		v, err := n.Client.VerifyAudit(ctx)
		if err != nil || !v.OK || v.Records < 6 {
			t.Fatalf("verify the audit chain from %s: %+v, %v; want one chain of both nodes' records, intact", n.Config.Node.Name, v, err)
		}
	}
	if err := b.Lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes, _ = a.Manager.Nodes(ctx); nodes[1].Reserved.Sandboxes != 1 {
		t.Fatalf("node-b's reservations as node-a sees them: %+v; want its one sandbox", nodes[1].Reserved)
	}

	if d, err := a.Manager.SetNodeDraining(ctx, "node-b", true); err != nil || d.State != "draining" || d.Self {
		t.Fatalf("drain node-b from node-a = %+v, %v", d, err)
	}
	if err := b.Lease.Renew(ctx); err != nil { // what its ticker does every lease period
		t.Fatal(err)
	}
	_, err = b.Client.Create(ctx, api.CreateSandboxRequest{Name: "late"})
	if err == nil || !strings.Contains(err.Error(), `node "node-b" is draining`) {
		t.Fatalf("create on drained node-b: %v; want a refusal naming the node and its state", err)
	}
	if list, _ := b.Client.Nodes(ctx); len(list) != 2 || list[0].State != "ready" || list[1].State != "draining" || !list[1].Self {
		t.Fatalf("Nodes from node-b = %+v; want node-a ready, node-b (itself) draining", list)
	}
	if _, err := a.Manager.SetNodeDraining(ctx, "node-b", false); err != nil {
		t.Fatal(err)
	}
	if err := b.Lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client.Create(ctx, api.CreateSandboxRequest{Name: "late"}); err != nil {
		t.Fatalf("create on node-b once ready again: %v", err)
	}
	// Both nodes' cleanups see every sandbox of the shared store: end them here.
	if _, err := a.Client.Terminate(ctx, "on-a"); err != nil {
		t.Fatalf("terminate on-a: %v", err)
	}
	for _, name := range []string{"on-b", "late"} {
		if _, err := b.Client.Terminate(ctx, name); err != nil {
			t.Fatalf("terminate %s: %v", name, err)
		}
	}

	dir, err := os.MkdirTemp("", "alf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(dir + "-secrets") })
	cfg := nodeConfig(dir, dir+"-secrets", filepath.Join(dir, "api.sock"))
	cfg.Store.DSN, cfg.Node.Name, cfg.Cluster.KeysDir = a.Config.Store.DSN, "node-a", keys
	var drv *fake.Driver
	third, err := daemon.Assemble(ctx, cfg, fakeAssembly(cfg, FakeOptions{}, slog.New(slog.DiscardHandler), &drv))
	if err == nil {
		third.Close()
		t.Fatal("a third node started under live node-a's name")
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"node-a" is held by another live node`) ||
		!strings.Contains(err.Error(), "lease ends at") {
		t.Fatalf("the third node's start: %v; want a refusal naming the holder and when its lease ends", err)
	}
}
