package server_test

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// A node lists itself, ready, with its capacity; its sandboxes name it; drained, it
// refuses creates naming its state, and made ready again it takes them. Only
// administrators see or drain nodes.
func TestNodesListAndDrain(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"dev"}})
	c := n.Client
	nodes, err := c.Nodes(bg)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	if len(nodes) != 1 || !nodes[0].Self || nodes[0].State != "ready" || nodes[0].Name == "" ||
		nodes[0].Capacity.Memory <= 0 || nodes[0].Capacity.CPUs <= 0 || nodes[0].Capacity.Sandboxes <= 0 || nodes[0].Epoch != 1 {
		t.Fatalf("Nodes = %+v; want this node alone, ready, with its capacity", nodes)
	}
	name := nodes[0].Name
	resp, err := c.Create(bg, api.CreateSandboxRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Sandbox.Node != name {
		t.Fatalf("the sandbox names node %q, want %q", resp.Sandbox.Node, name)
	}

	dev, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "dev")})
	_, err = dev.Nodes(bg)
	wantCode(t, "a developer lists nodes", err, "permission_denied")
	_, err = dev.DrainNode(bg, name)
	wantCode(t, "a developer drains the node", err, "permission_denied")

	d, err := c.DrainNode(bg, name)
	if err != nil || d.State != "draining" || d.Name != name {
		t.Fatalf("DrainNode = %+v, %v; want it draining", d, err)
	}
	_, err = dev.Create(bg, api.CreateSandboxRequest{Name: "after"})
	wantCode(t, "a create on a drained node", err, "failed_precondition")
	if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "draining") {
		t.Fatalf("the refusal %q does not name the node and its state", err)
	}
	if _, err := c.Exec(bg, "before", api.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatalf("a sandbox on the drained node stopped working: %v", err)
	}
	if nodes, _ := c.Nodes(bg); len(nodes) != 1 || nodes[0].State != "draining" {
		t.Fatalf("Nodes after the drain = %+v, want it draining", nodes)
	}
	_, err = c.DrainNode(bg, "no-such-node")
	wantCode(t, "drain of an unknown node", err, "not_found")

	if r, err := c.ReadyNode(bg, name); err != nil || r.State != "ready" {
		t.Fatalf("ReadyNode = %+v, %v; want it ready", r, err)
	}
	if _, err := dev.Create(bg, api.CreateSandboxRequest{Name: "after"}); err != nil {
		t.Fatalf("a create once the node is ready again: %v", err)
	}
}
