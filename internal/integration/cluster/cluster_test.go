package cluster

import (
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestThreeNodesJoin: three daemons, each on its own address, sharing one store, see
// each other: node ls through any of them lists all three ready, at the addresses they
// advertise, and marks the one that answered.
func TestThreeNodesJoin(t *testing.T) {
	c := newCluster(t)
	for _, n := range c.Nodes() {
		nodes := n.nodeList(t)
		if len(nodes) != len(c.Nodes()) {
			t.Fatalf("node ls on %s lists %d nodes: %+v; want %d", n.Name, len(nodes), nodes, len(c.Nodes()))
		}
		for i, got := range nodes {
			want := c.Node(i)
			if got.Name != want.Name || got.State != "ready" || got.Address != want.Advertise || got.Self != (want == n) {
				t.Errorf("node ls on %s, row %d: %s %s at %q (self %v); want %s ready at %q (self %v)",
					n.Name, i, got.Name, got.State, got.Address, got.Self, want.Name, want.Advertise, want == n)
			}
		}
	}
	_ = api.StateRunning
}
