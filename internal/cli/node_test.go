package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv"
)

// node ls lists this node, ready, in a table and as JSON with its name, state, address,
// capacity and reservations; node drain makes creates on it fail naming the state, and
// node ready undoes it.
func TestNodeVerbs(t *testing.T) {
	n := newNode(t)
	out, _, err := n.run(bg, "", "node", "ls")
	wantExit(t, err, 0)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.HasPrefix(lines[1], "node-1 (this)") || !strings.Contains(lines[1], "ready") {
		t.Fatalf("node ls =\n%s\nwant a header and node-1, this node, ready", out)
	}
	out, _, err = n.run(bg, "", "node", "ls", "-o", "json")
	wantExit(t, err, 0)
	var nodes []map[string]any
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("node ls -o json = %s (%v); want a list of one node", out, err)
	}
	for _, k := range []string{"name", "state", "capacity", "reserved", "epoch", "renewed_at"} {
		if _, ok := nodes[0][k]; !ok {
			t.Errorf("node ls -o json has no %q: %s", k, out)
		}
	}
	if c, _ := nodes[0]["capacity"].(map[string]any); c == nil || c["memory"] == nil || c["cpus"] == nil || c["sandboxes"] == nil {
		t.Errorf("capacity = %v, want memory, cpus and sandboxes", nodes[0]["capacity"])
	}
	out, _, err = n.run(bg, "", "node", "drain", "node-1")
	wantExit(t, err, 0)
	if out != "node node-1: draining\n" {
		t.Fatalf("node drain = %q", out)
	}
	_, errOut, err := n.run(bg, "", "create", "late")
	if err == nil || !strings.Contains(errOut, `node "node-1" is draining`) {
		t.Fatalf("create on a drained node: %v, stderr %q; want a refusal naming the node and its state", err, errOut)
	}
	_, errOut, err = n.run(bg, "", "node", "drain")
	if err == nil || errOut == "" {
		t.Fatalf("node drain without NAME: %v, %q; want a usage error", err, errOut)
	}
	out, _, err = n.run(bg, "", "node", "ready", "node-1")
	wantExit(t, err, 0)
	if out != "node node-1: ready\n" {
		t.Fatalf("node ready = %q", out)
	}
	_, _, err = n.run(bg, "", "create", "late")
	wantExit(t, err, 0)
}

// node ls shows a node's runtimes and labels; create --node-selector is refused on a
// node that lacks a label, naming it, and made on one that carries it.
func TestNodeSelector(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{NodeLabels: map[string]string{"zone": "a", "disk": "ssd"}})}
	out := n.must(t, "node", "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "RUNTIMES") ||
		!strings.Contains(lines[1], "disk=ssd,zone=a") || !strings.Contains(lines[1], n.Node.Manager.Runtimes()[0]) {
		t.Fatalf("node ls =\n%s\nwant the node's runtimes and labels", out)
	}
	_, errOut, err := n.run(bg, "", "create", "x", "--node-selector", "zone=a", "--node-selector", "gpu=yes")
	if err == nil || !strings.Contains(errOut, "node-1 lacks label gpu=yes") {
		t.Fatalf("create with a label the node lacks: %v, stderr %q; want a refusal naming it", err, errOut)
	}
	n.must(t, "create", "x", "--node-selector", "zone=a", "--node-selector", "disk=ssd")
}
