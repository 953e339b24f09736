package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// newNode is a node of instance inst acquiring name with a lease until at(expires).
func newNode(name, inst, addr string, expires int) *store.Node {
	return &store.Node{Name: name, Instance: inst, Address: addr,
		Capacity:     store.Resources{Memory: 8 << 30, CPUs: 4, Sandboxes: 4096},
		LeaseExpires: at(expires), StartedAt: at(0), RenewedAt: at(0)}
}

// testNodeLease: a node acquires its name, renews it, is lost once its lease lapses,
// and a drain outlasts its restart; records survive a re-open.
func testNodeLease(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	n := newNode("n1", "i1", "10.0.0.1:7443", 10)
	if err := s.AcquireNode(ctx, n, at(0)); err != nil {
		t.Fatalf("AcquireNode: %v", err)
	}
	if n.Epoch != 1 {
		t.Fatalf("first acquire: epoch %d, want 1", n.Epoch)
	}
	n.LeaseExpires, n.RenewedAt, n.Reserved = at(15), at(5), store.Resources{Memory: 1 << 30, CPUs: 1, Sandboxes: 1}
	if err := s.RenewNode(ctx, n); err != nil {
		t.Fatalf("RenewNode: %v", err)
	}
	got, err := s.GetNode(ctx, "n1")
	if err != nil {
		t.Fatalf("GetNode: %v", err)
	}
	if !got.LeaseExpires.Equal(at(15)) || got.Reserved.Memory != 1<<30 || got.Address != "10.0.0.1:7443" || got.Capacity.CPUs != 4 {
		t.Fatalf("after renew: %+v, want lease to at(15), 1GiB reserved, the address and capacity kept", got)
	}
	for _, c := range []struct {
		now  int
		want store.NodeState
	}{{14, store.NodeReady}, {15, store.NodeLost}, {100, store.NodeLost}} {
		if st := got.StateAt(at(c.now)); st != c.want {
			t.Errorf("StateAt(at(%d)) = %s, want %s", c.now, st, c.want)
		}
	}
	if d, err := s.SetNodeDraining(ctx, "n1", true); err != nil || !d.Draining || d.StateAt(at(6)) != store.NodeDraining {
		t.Fatalf("SetNodeDraining = %+v, %v; want draining", d, err)
	}
	if err := s.RenewNode(ctx, n); err != nil || !n.Draining {
		t.Fatalf("RenewNode after drain: %v, draining %v; want the renewal to learn of the drain", err, n.Draining)
	}
	if err := s.ReleaseNode(ctx, "n1", n.Epoch); err != nil {
		t.Fatalf("ReleaseNode: %v", err)
	}
	s.Close()
	s = open(t)
	got, err = s.GetNode(ctx, "n1")
	if err != nil || got.StateAt(at(6)) != store.NodeStopped {
		t.Fatalf("after release and re-open: %+v, %v; want stopped", got, err)
	}
	again := newNode("n1", "i1", "10.0.0.1:7443", 30)
	if err := s.AcquireNode(ctx, again, at(20)); err != nil || again.Epoch != 2 || !again.Draining {
		t.Fatalf("re-acquire = epoch %d draining %v, %v; want epoch 2, still draining", again.Epoch, again.Draining, err)
	}
	if _, err := s.SetNodeDraining(ctx, "nope", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetNodeDraining of an unknown node: %v, want ErrNotFound", err)
	}
	if _, err := s.GetNode(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode of an unknown node: %v, want ErrNotFound", err)
	}
	if err := s.RenewNode(ctx, newNode("nope", "i9", "", 10)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("RenewNode of an unknown node: %v, want ErrNotFound", err)
	}
}

// testNodeNameHeld: a node cannot take the name of another live node (the error names
// the holder and when its lease ends); once that lease lapses it can, and the old
// holder's renewals and release are then refused.
func testNodeNameHeld(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	a := newNode("n1", "ia", "10.0.0.1:7443", 10)
	if err := s.AcquireNode(ctx, a, at(0)); err != nil {
		t.Fatalf("AcquireNode a: %v", err)
	}
	b := newNode("n1", "ib", "10.0.0.2:7443", 15)
	err := s.AcquireNode(ctx, b, at(5))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("AcquireNode of a live node's name: %v, want ErrFailedPrecondition", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "10.0.0.1:7443") || !strings.Contains(msg, at(10).UTC().Format(time.RFC3339)) {
		t.Errorf("refusal %q does not name the holder's address and when its lease ends", msg)
	}
	// The same instance (a restart on the same state) takes its own name back at once.
	a2 := newNode("n1", "ia", "10.0.0.1:7443", 15)
	if err := s.AcquireNode(ctx, a2, at(5)); err != nil || a2.Epoch != 2 {
		t.Fatalf("AcquireNode by the holder's own instance = epoch %d, %v; want epoch 2", a2.Epoch, err)
	}
	// Lapsed: another instance takes it; the old holder is fenced off.
	b.LeaseExpires = at(30)
	if err := s.AcquireNode(ctx, b, at(15)); err != nil || b.Epoch != 3 {
		t.Fatalf("AcquireNode after the lease lapsed = epoch %d, %v; want epoch 3", b.Epoch, err)
	}
	a2.LeaseExpires = at(40)
	if err := s.RenewNode(ctx, a2); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Fatalf("RenewNode by the lapsed holder: %v, want ErrVersionConflict", err)
	}
	if err := s.ReleaseNode(ctx, "n1", a2.Epoch); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Fatalf("ReleaseNode by the lapsed holder: %v, want ErrVersionConflict", err)
	}
	got, _ := s.GetNode(ctx, "n1")
	if got == nil || got.Instance != "ib" || !got.LeaseExpires.Equal(at(30)) {
		t.Fatalf("record after the takeover = %+v, want ib's lease to at(30)", got)
	}
}

// testConcurrentNodes: two nodes renewing at once each keep their own lease, and of
// many instances acquiring one free name at once exactly one wins.
func testConcurrentNodes(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	nodes := []*store.Node{newNode("a", "ia", "10.0.0.1:1", 10), newNode("b", "ib", "10.0.0.2:1", 10)}
	for _, n := range nodes {
		if err := s.AcquireNode(ctx, n, at(0)); err != nil {
			t.Fatalf("AcquireNode %s: %v", n.Name, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for _, n := range nodes {
		wg.Go(func() {
			c := *n
			for i := 1; i <= 20; i++ {
				c.LeaseExpires, c.Reserved.Sandboxes = at(10+i), i
				if err := s.RenewNode(ctx, &c); err != nil {
					errs <- err
				}
			}
		})
	}
	const racers = 8
	won := make(chan int64, racers)
	for i := range racers {
		wg.Go(func() {
			n := newNode("c", string(rune('a'+i)), "", 10)
			if err := s.AcquireNode(ctx, n, at(0)); err == nil {
				won <- n.Epoch
			} else if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	close(won)
	for err := range errs {
		t.Errorf("concurrent node calls: %v", err)
	}
	if n := len(won); n != 1 {
		t.Fatalf("%d of %d instances acquired one free name at once, want 1", n, racers)
	}
	list, err := s.ListNodes(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("ListNodes = %d nodes, %v; want 3", len(list), err)
	}
	for _, n := range list[:2] {
		if !n.LeaseExpires.Equal(at(30)) || n.Reserved.Sandboxes != 20 || n.Epoch != 1 {
			t.Errorf("node %s after concurrent renewals: lease %v, reserved %d, epoch %d; want at(30), 20, 1", n.Name, n.LeaseExpires, n.Reserved.Sandboxes, n.Epoch)
		}
	}
}

// testNodePlacement: a node's labels, runtimes and images are stored when it acquires
// its name and replaced by each renewal; ReservedByNode sums the memory and CPU of the
// sandboxes in the states asked for, by node, in one query, leaving out the ids asked.
func testNodePlacement(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	n := newNode("n1", "i1", "", 10)
	n.Labels, n.Runtimes, n.Images = map[string]string{"zone": "a"}, []string{"runc"}, []string{"sha256:1"}
	ok(t, s.AcquireNode(ctx, n, at(0)), "AcquireNode")
	got, err := s.GetNode(ctx, "n1")
	ok(t, err, "GetNode")
	if got.Labels["zone"] != "a" || !slices.Equal(got.Runtimes, []string{"runc"}) || !slices.Equal(got.Images, []string{"sha256:1"}) {
		t.Fatalf("after acquire: labels %v runtimes %v images %v; want zone=a, [runc], [sha256:1]", got.Labels, got.Runtimes, got.Images)
	}
	n.Labels, n.Runtimes, n.Images = map[string]string{"zone": "b", "gpu": "yes"}, []string{"runc", "runsc"}, nil
	ok(t, s.RenewNode(ctx, n), "RenewNode")
	got, err = s.GetNode(ctx, "n1")
	ok(t, err, "GetNode")
	if len(got.Labels) != 2 || got.Labels["zone"] != "b" || !slices.Equal(got.Runtimes, []string{"runc", "runsc"}) || len(got.Images) != 0 {
		t.Fatalf("after renew: labels %v runtimes %v images %v; want zone=b gpu=yes, [runc runsc], none", got.Labels, got.Runtimes, got.Images)
	}

	for i, c := range []struct {
		node, state string
		memory      int64
		cpu         float64
	}{
		{"n1", "running", 1 << 30, 1}, {"n1", "creating", 512 << 20, 0.5}, {"n1", "suspended", 4 << 30, 2},
		{"n2", "running", 2 << 30, 2}, {"n2", terminated, 8 << 30, 4}, {"", "running", 256 << 20, 0.25},
	} {
		sb := newSandbox(fmt.Sprintf("sb_%d", i), "alice", fmt.Sprintf("s%d", i), i)
		sb.Node, sb.Limits.Memory, sb.Limits.CPU = c.node, c.memory, c.cpu
		ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
		if c.state != "running" { // a state reached by update is summed as well
			sb.State = store.State(c.state)
			ok(t, s.UpdateSandbox(ctx, sb), "UpdateSandbox")
		}
	}
	sums, err := s.ReservedByNode(ctx, []store.State{"creating", "running"}, nil, nil)
	ok(t, err, "ReservedByNode")
	want := map[string]store.Resources{
		"n1": {Memory: 1<<30 + 512<<20, CPUs: 1.5, Sandboxes: 2},
		"n2": {Memory: 2 << 30, CPUs: 2, Sandboxes: 1},
		"":   {Memory: 256 << 20, CPUs: 0.25, Sandboxes: 1},
	}
	if !maps.Equal(sums, want) {
		t.Fatalf("ReservedByNode = %v, want %v", sums, want)
	}
	if sums, err := s.ReservedByNode(ctx, []store.State{"resuming"}, nil, nil); err != nil || len(sums) != 0 {
		t.Fatalf("ReservedByNode(resuming) = %v, %v; want none", sums, err)
	}
	// sb_0 (n1, 1GiB) and sb_3 (n2, all it had) left out.
	sums, err = s.ReservedByNode(ctx, []store.State{"creating", "running"}, []string{"sb_0", "sb_3", "sb_none"}, nil)
	ok(t, err, "ReservedByNode except")
	want = map[string]store.Resources{"n1": {Memory: 512 << 20, CPUs: 0.5, Sandboxes: 1}, "": {Memory: 256 << 20, CPUs: 0.25, Sandboxes: 1}}
	if !maps.Equal(sums, want) {
		t.Fatalf("ReservedByNode except sb_0, sb_3 = %v, want %v", sums, want)
	}
	// Only the nodes asked for are read.
	sums, err = s.ReservedByNode(ctx, []store.State{"creating", "running"}, nil, []string{"n2", ""})
	ok(t, err, "ReservedByNode of n2 and unnamed")
	want = map[string]store.Resources{"n2": {Memory: 2 << 30, CPUs: 2, Sandboxes: 1}, "": {Memory: 256 << 20, CPUs: 0.25, Sandboxes: 1}}
	if !maps.Equal(sums, want) {
		t.Fatalf("ReservedByNode of n2 and unnamed = %v, want %v", sums, want)
	}
	if sums, err := s.ReservedByNode(ctx, []store.State{"creating", "running"}, nil, []string{}); err != nil || len(sums) != 0 {
		t.Fatalf("ReservedByNode of no node = %v, %v; want none", sums, err)
	}
}

// testFenceNode: a lost node's sandboxes in the states asked for are marked, in one
// transaction with its record, once per epoch however many fence at once; a node that
// is not lost, or was acquired again, is refused and nothing changes.
func testFenceNode(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	n := newNode("n1", "i1", "", 10)
	ok(t, s.AcquireNode(ctx, n, at(0)), "AcquireNode")
	other := newNode("n2", "i2", "", 100)
	ok(t, s.AcquireNode(ctx, other, at(0)), "AcquireNode n2")
	for i, c := range []struct{ id, node, state string }{
		{"sb_run", "n1", "running"}, {"sb_res", "n1", "resuming"}, {"sb_sus", "n1", "suspended"},
		{"sb_other", "n2", "running"},
	} {
		sb := newSandbox(c.id, "alice", c.id, i)
		sb.Node, sb.State = c.node, store.State(c.state)
		ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox "+c.id)
	}
	states := []store.State{"running", "resuming"}
	mark := func(sb *store.Sandbox) { sb.State, sb.Failure = "lost", "node n1 lost" }
	if _, err := s.FenceNode(ctx, "n1", n.Epoch, at(5), states, mark); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("FenceNode of a live node: %v; want a failed precondition", err)
	}
	if _, err := s.FenceNode(ctx, "n1", n.Epoch+1, at(20), states, mark); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Fatalf("FenceNode of another epoch: %v; want a version conflict", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []string
	)
	for range 4 {
		wg.Go(func() {
			got, err := s.FenceNode(ctx, "n1", n.Epoch, at(20), states, mark)
			if err != nil {
				t.Errorf("FenceNode: %v", err)
			}
			mu.Lock()
			total = append(total, sandboxIDs(got)...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sameIDs(t, total, []string{"sb_run", "sb_res"}, "sandboxes marked by four fences at once")
	for id, want := range map[string]string{"sb_run": "lost", "sb_res": "lost", "sb_sus": "suspended", "sb_other": "running"} {
		sb, err := s.GetSandbox(ctx, id)
		ok(t, err, "GetSandbox "+id)
		if string(sb.State) != want {
			t.Errorf("%s is %s after the fence, want %s", id, sb.State, want)
		}
		if want == "lost" && (sb.Version != 2 || sb.Failure != "node n1 lost") {
			t.Errorf("%s after the fence: version %d, failure %q; want version 2 and the mark's failure", id, sb.Version, sb.Failure)
		}
	}
	if lost, err := s.ListSandboxes(ctx, store.SandboxFilter{States: []store.State{"lost"}}); err != nil || len(lost) != 2 {
		t.Fatalf("ListSandboxes(lost) = %v, %v; want the two marked", sandboxIDs(lost), err)
	}
	// The node comes back: a new epoch, which its old one's fence no longer touches.
	back := newNode("n1", "i1", "", 40)
	ok(t, s.AcquireNode(ctx, back, at(30)), "AcquireNode again")
	if back.FencedEpoch != n.Epoch {
		t.Fatalf("acquired again: fenced epoch %d, want %d kept", back.FencedEpoch, n.Epoch)
	}
	if _, err := s.FenceNode(ctx, "n1", n.Epoch, at(50), states, mark); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Fatalf("FenceNode of the old epoch after a new acquire: %v; want a version conflict", err)
	}
}
