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

// TestTwoNodesShareMembership: two nodes on one PostgreSQL database each hold a lease
// and list each other; a sandbox names the node it was created on; a drain set through
// one node reaches the other at its next renewal and stops its creates; and a third node
// cannot start under a live node's name.
func TestTwoNodesShareMembership(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).CreateDatabase(t)
	a := NewFakeNode(t, FakeOptions{StoreDSN: dsn, NodeName: "node-a"})
	b := NewFakeNode(t, FakeOptions{StoreDSN: dsn, NodeName: "node-b"})

	// The audit chain is one per node and not yet shared safely between nodes (each
	// numbers its records from what it read at start), so only node-b's API is called;
	// node-a is asked through its manager.
	nodes, err := a.Manager.Nodes(ctx)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	if len(nodes) != 2 || nodes[0].Name != "node-a" || !nodes[0].Self || nodes[1].Name != "node-b" || nodes[1].Self ||
		nodes[0].State != "ready" || nodes[1].State != "ready" {
		t.Fatalf("Nodes from node-a = %+v; want node-a (itself) and node-b, both ready", nodes)
	}
	resp, err := b.Client.Create(ctx, api.CreateSandboxRequest{Name: "on-b"})
	if err != nil {
		t.Fatalf("create on node-b: %v", err)
	}
	if resp.Sandbox.Node != "node-b" {
		t.Fatalf("the sandbox made on node-b names node %q", resp.Sandbox.Node)
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
	cfg.Store.DSN, cfg.Node.Name = a.Config.Store.DSN, "node-a"
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
