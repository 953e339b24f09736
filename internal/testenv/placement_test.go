package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestDefaultPlacement: with no placement of its own, a cluster node places creates by
// the nodes' labels and the memory their sandboxes reserve now (read from the records,
// not the leases, which have not been renewed since): a create that selects node-a's
// label is made there, the next one goes to node-b, which has more memory free, and
// one that selects a label no node has is refused naming what each lacks.
func TestDefaultPlacement(t *testing.T) {
	c := newCluster(t, nil, func(o *FakeOptions) {
		o.NodeLabels = map[string]string{"zone": strings.TrimPrefix(o.NodeName, "node-")}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "here", NodeSelector: map[string]string{"zone": "a"}})
	if err != nil || resp.Sandbox.Node != "node-a" {
		t.Fatalf("create selecting zone=a: %+v, %v; want it made on node-a", resp, err)
	}
	resp, err = c.alice.Create(ctx, api.CreateSandboxRequest{Name: "roomiest"})
	if err != nil || resp.Sandbox.Node != "node-b" {
		t.Fatalf("create selecting nothing: %+v, %v; want it made on node-b, which has more memory free", resp, err)
	}
	resp, err = c.alice.Create(ctx, api.CreateSandboxRequest{Name: "far", NodeSelector: map[string]string{"zone": "b"}})
	if err != nil || resp.Sandbox.Node != "node-b" {
		t.Fatalf("create selecting zone=b: %+v, %v; want it made on node-b", resp, err)
	}
	_, err = c.alice.Create(ctx, api.CreateSandboxRequest{Name: "nowhere", NodeSelector: map[string]string{"zone": "c"}})
	if !errors.Is(err, errdefs.ErrQuotaExceeded) ||
		!strings.Contains(err.Error(), "no node can hold 1GiB of memory, 1 CPUs, labels zone=c: node-a lacks label zone=c, node-b lacks label zone=c") {
		t.Fatalf("create selecting a label no node has: %v; want refused naming each node's shortfall", err)
	}
}
