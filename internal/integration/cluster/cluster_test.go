package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/objstore"
)

var background = context.Background()

// TestThreeNodes: three daemons, each on its own address in a namespace of its own,
// sharing one store and one bucket. They join (node ls through any lists all three
// ready at their advertised addresses); each node's own API creates, execs, writes and
// reads files, suspends and resumes its sandboxes; a snapshot taken on node-0 is a
// record every node reads and chunks in the bucket, and node-1 forks it; another
// owner's token reaches none of alice's sandboxes on any node; and a call for a
// sandbox held by another node is answered by that node.
func TestThreeNodes(t *testing.T) {
	c := newCluster(t)
	wantJoined(t, c)

	// Each node runs sandboxes of its own, made through its own API.
	payload := bytes.Repeat([]byte("cluster\x00\xff"), 4096)
	for _, n := range c.Nodes() {
		alice := n.As("alice")
		name := "sb-" + n.Name
		resp, err := alice.Create(background, api.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatalf("create %s through %s: %v", name, n.Name, err)
		}
		if resp.Sandbox.Node != n.Name {
			t.Errorf("%s made through %s names node %q; want %q", name, n.Name, resp.Sandbox.Node, n.Name)
		}
		if out := mustExec(t, alice, name, "echo hi from $(hostname) > /root/marker; cat /root/marker"); !strings.HasPrefix(out, "hi from") {
			t.Errorf("exec in %s: %q", name, out)
		}
		if _, err := alice.Upload(background, name, "/root/data.bin", 0o640, bytes.NewReader(payload)); err != nil {
			t.Fatalf("upload to %s: %v", name, err)
		}
		if _, err := alice.Suspend(background, name); err != nil {
			t.Fatalf("suspend %s: %v", name, err)
		}
		if sb, err := alice.Get(background, name); err != nil || sb.State != api.StateSuspended {
			t.Fatalf("get %s after suspend: %+v, %v; want suspended", name, sb, err)
		}
		if _, err := alice.Resume(background, name); err != nil {
			t.Fatalf("resume %s: %v", name, err)
		}
		var back bytes.Buffer
		if _, err := alice.Download(background, name, "/root/data.bin", &back); err != nil || !bytes.Equal(back.Bytes(), payload) {
			t.Errorf("download from %s after resume: %d bytes, %v; want the %d uploaded", name, back.Len(), err, len(payload))
		}
		if out := mustExec(t, alice, name, "cat /root/marker"); !strings.HasPrefix(out, "hi from") {
			t.Errorf("%s's rootfs write after resume: %q", name, out)
		}
	}

	// A snapshot taken on node-0 is node-1's to read and fork.
	a0, a1 := c.Node(0).As("alice"), c.Node(1).As("alice")
	snap, err := a0.Snapshot(background, "sb-node-0", map[string]string{"from": "node-0"})
	if err != nil || snap.Snapshot == nil {
		t.Fatalf("snapshot sb-node-0 on node-0: %+v, %v", snap, err)
	}
	id := snap.Snapshot.ID
	got, err := a1.GetSnapshot(background, id)
	if err != nil || got.State != "ready" || len(got.Chunks) == 0 {
		t.Fatalf("snapshot %s read through node-1: %+v, %v; want it ready, with its chunks", id, got, err)
	}
	wantInBucket(t, c, id, got.Chunks)
	fork, err := a1.Fork(background, id, api.ForkRequest{Name: "fork-on-1"})
	if err != nil {
		t.Fatalf("fork node-0's snapshot %s on node-1: %v", id, err)
	}
	if fork.Sandbox == nil || fork.Sandbox.Node != "node-1" {
		t.Errorf("the fork made through node-1: %+v; want it on node-1", fork.Sandbox)
	}
	var forked bytes.Buffer
	if _, err := a1.Download(background, "fork-on-1", "/root/data.bin", &forked); err != nil || !bytes.Equal(forked.Bytes(), payload) {
		t.Errorf("the fork's copy of the file: %d bytes, %v; want the %d of its snapshot", forked.Len(), err, len(payload))
	}

	// Another owner reaches none of alice's sandboxes, by name or id, through any node.
	for _, n := range c.Nodes() {
		bob := n.As("bob")
		for _, other := range c.Nodes() {
			sb, err := a0.Get(background, "sb-"+other.Name)
			if err != nil {
				t.Fatalf("get sb-%s as alice: %v", other.Name, err)
			}
			for _, ref := range []string{sb.Name, sb.ID} {
				if _, err := bob.Get(background, ref); !client.IsNotFound(err) {
					t.Errorf("bob's get of alice's %s through %s: %v; want not_found", ref, n.Name, err)
				}
				if _, err := bob.Exec(background, ref, api.ExecRequest{Shell: "true", Timeout: "30s"}); !client.IsNotFound(err) {
					t.Errorf("bob's exec in alice's %s through %s: %v; want not_found", ref, n.Name, err)
				}
			}
		}
		if list, err := bob.List(background, client.ListOptions{}); err != nil || len(list) != 0 {
			t.Errorf("bob's list through %s: %d sandboxes, %v; want none", n.Name, len(list), err)
		}
	}

	// A call on node-0 for node-1's sandbox is node-1's to answer.
	res, err := a0.Exec(background, "sb-node-1", api.ExecRequest{Shell: "cat /root/marker", Timeout: "30s"})
	expectForwarded(t, err, "node-1")
	if !strings.HasPrefix(res.Stdout, "hi from") {
		t.Errorf("exec in sb-node-1 through node-0: %q; want node-1's sandbox's marker", res.Stdout)
	}
}

// wantJoined: node ls through each node lists every node ready, at the address it
// advertises, in name order, and marks the node that answered.
func wantJoined(t *testing.T, c *Cluster) {
	t.Helper()
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
}

// mustExec runs shell in ref through cl and fails the test unless it succeeds; it
// returns stdout.
func mustExec(t *testing.T, cl *client.Client, ref, shell string) string {
	t.Helper()
	res, err := cl.Exec(background, ref, api.ExecRequest{Shell: shell, Timeout: "60s"})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", shell, ref, err)
	}
	if res.State != api.ExecSucceeded || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %s exit %d, stderr %q; want success", shell, ref, res.State, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// wantInBucket: the snapshot's manifest and every one of its chunks are objects in the
// cluster's bucket.
func wantInBucket(t *testing.T, c *Cluster, id string, chunks []string) {
	t.Helper()
	objs, err := objstore.OpenS3(background, c.S3.Config(c.Bucket))
	if err != nil {
		t.Fatalf("open the cluster's bucket: %v", err)
	}
	keys := []string{"snapshots/manifests/" + id + ".json"}
	for _, sum := range chunks {
		sum = strings.TrimPrefix(sum, "sha256:")
		keys = append(keys, fmt.Sprintf("snapshots/chunks/%s/%s", sum[:2], sum))
	}
	for _, k := range keys {
		if _, err := objs.Stat(background, k); err != nil {
			t.Errorf("snapshot %s: %s in the bucket: %v", id, k, err)
		}
	}
}
