package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/objstore"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/postgres"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// cluster is a PostgreSQL store and a SeaweedFS bucket that nodes share.
type cluster struct {
	st    store.Store
	objs  objstore.Store
	clock *clock
}

func newCluster(t testing.TB) *cluster { return newClusterSized(t, 4) }

// newClusterSized is newCluster with a bucket of volumes 64 MiB volumes.
func newClusterSized(t testing.TB, volumes int) *cluster {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.Start(t).CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := objstore.OpenS3(ctx, s3test.StartSized(t, volumes).Config("airlock"))
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{st: st, objs: objs, clock: &clock{t: time.Now()}}
}

// clusterNode is one node of c: a manager named name, with its membership lease, its
// own snapshot directory kept in the bucket, and the fake driver in dir (a node that
// restarts on dir finds its containers there).
type clusterNode struct {
	*Manager
	drv   *fake.Driver
	lease *membership.Lease
}

// leasePeriod is the test nodes' lease period; a lease lasts two.
const leasePeriod = time.Second

func (c *cluster) node(t testing.TB, name, dir string) *clusterNode {
	t.Helper()
	ctx := context.Background()
	drv, err := fake.New(filepath.Join(dir, "sb"), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := sharedNode(t, name, dir, c.st, c.objs, drv)
	m.SetClock(c.clock.now)
	lease, err := membership.Acquire(ctx, c.st, membership.Config{Name: name, Instance: dir, Period: leasePeriod, Now: c.clock.now}, m.Reserved, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetMembership(lease)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{Manager: m, drv: drv, lease: lease}
	t.Cleanup(n.stop)
	return n
}

// stop ends the node as a crash would: its manager stops, its lease is not given
// back, and its containers stop (the fake's live only in the test's process).
func (n *clusterNode) stop() {
	n.Close()
	ids, _ := n.drv.List(context.Background())
	for _, id := range ids {
		n.drv.Stop(context.Background(), id)
	}
}

func (n *clusterNode) sh(t testing.TB, ref, script string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	res, err := n.Exec(context.Background(), "alice", ref, ExecRequest{Shell: script}, &out, &out)
	if err == nil && res.ExitCode != 0 {
		t.Fatalf("%s on %s: exit %d: %s", script, n.cfg.NodeName, res.ExitCode, out.String())
	}
	return out.String(), err
}

var alice = Call{Owner: "alice"}

// TestLostNodeSandboxesMarkedLost: once node-b's lease lapses, node-a (twice, and the
// node-c beside it at once) marks its running sandbox lost with one node_lost event, and
// leaves its suspended one and node-a's own as they were; every call on the lost sandbox
// answers why and what to do, from either node; terminate still ends it.
func TestLostNodeSandboxesMarkedLost(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	a := c.node(t, "node-a", t.TempDir())
	b := c.node(t, "node-b", t.TempDir())
	cc := c.node(t, "node-c", t.TempDir())
	for _, x := range []struct {
		n    *clusterNode
		name string
	}{{b, "run"}, {b, "sus"}, {a, "mine"}} {
		if _, _, err := x.n.Create(ctx, alice, CreateRequest{Name: x.name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.Suspend(ctx, alice, "sus"); err != nil {
		t.Fatal(err)
	}

	c.clock.add(3 * leasePeriod) // node-b renews no more; a and c do
	for _, n := range []*clusterNode{a, cc} {
		if err := n.lease.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range []*clusterNode{a, cc, a} {
		wg.Go(func() { n.WatchNodes(ctx) })
	}
	wg.Wait()

	for name, want := range map[string]State{"run": Lost, "sus": Suspended, "mine": Running} {
		sb, err := a.Resolve(ctx, "alice", name)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != want {
			t.Errorf("%s is %s after node-b was lost, want %s", name, sb.State, want)
		}
	}
	run, _ := a.Resolve(ctx, "alice", "run")
	lost := eventsOf(t, c.st, run.ID)["node_lost"]
	if len(lost) != 1 || !strings.Contains(string(lost[0].Data), `"node":"node-b"`) || !strings.Contains(string(lost[0].Data), `"from":"running"`) {
		t.Fatalf("node_lost events of run: %d (%v); want one naming node-b and the state it was in", len(lost), lost)
	}
	for _, n := range []*clusterNode{a, b} {
		_, err := n.sh(t, "run", "true")
		var e *errdefs.Error
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !errors.As(err, &e) || e.Details["reason"] != "node_lost" ||
			!strings.Contains(err.Error(), "lost with its node \"node-b\"") || !strings.Contains(err.Error(), "airlock resume run") {
			t.Errorf("exec on the lost sandbox through %s: %v; want a failed precondition (node_lost) naming the node and the resume", n.cfg.NodeName, err)
		}
	}
	if _, _, err := a.Suspend(ctx, alice, "run"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "was lost") {
		t.Errorf("suspend of the lost sandbox: %v; want the lost refusal", err)
	}
	list, err := a.List(ctx, store.SandboxFilter{Owner: "alice", States: []State{Lost}})
	if err != nil || len(list) != 1 || list[0].Name != "run" {
		t.Fatalf("list of lost sandboxes: %v, %v; want run", list, err)
	}
	if _, sb, err := a.Terminate(ctx, alice, "run"); err != nil || sb.State != Terminated {
		t.Fatalf("terminate the lost sandbox through node-a: %v, %v; want it terminated", sb, err)
	}

	// Another instance takes the name over: the old one's renewal is refused, and from
	// then on it acts on none of the name's sandboxes.
	c.node(t, "node-b", t.TempDir())
	if err := b.lease.Renew(ctx); err == nil {
		t.Fatal("the old node-b renewed a lease another instance took over")
	}
	if _, err := b.sh(t, "sus", "true"); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "no longer holds") {
		t.Errorf("exec through the old node-b after the takeover: %v; want unavailable: it no longer holds its lease", err)
	}
	if sb, _ := a.Resolve(ctx, "alice", "sus"); sb.State != Suspended || sb.Generation != 1 {
		t.Errorf("the old node-b's sandbox after the refused exec: %s, generation %d; want it suspended as it was", sb.State, sb.Generation)
	}
}

// TestLostSandboxResumesElsewhere: a sandbox suspended on node-b with the bucket is
// resumed by node-a once node-b is drained, its files intact, and so is one whose files
// node-b uploads once it sees its drain; one that ran on node-b when
// node-b was lost resumes on node-a from its last suspend, and the answer says what was
// lost; node-b, restarted on its state, deletes its copies of both and runs neither.
func TestLostSandboxResumesElsewhere(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	a := c.node(t, "node-a", t.TempDir())
	bdir := t.TempDir()
	b := c.node(t, "node-b", bdir)

	_, moved, err := b.Create(ctx, alice, CreateRequest{Name: "moved"})
	if err != nil {
		t.Fatal(err)
	}
	b.sh(t, "moved", "mkdir -p home && echo kept > home/f")
	if _, sb, err := b.Suspend(ctx, alice, "moved"); err != nil || sb.Files == "" || sb.FilesGen != sb.Generation {
		t.Fatalf("suspend with the bucket: %+v, %v; want its files recorded at its generation", sb, err)
	}
	if _, err := a.sh(t, "moved", "true"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node-b") {
		t.Fatalf("exec through node-a while node-b is ready: %v; want the other-node refusal", err)
	}
	// One suspended before the node had a bucket: its files are only on node-b, until
	// node-b sees its drain.
	_, early, err := b.Create(ctx, alice, CreateRequest{Name: "early"})
	if err != nil {
		t.Fatal(err)
	}
	b.sh(t, "early", "echo early > f")
	b.Suspend(ctx, alice, "early")
	early, _ = c.st.GetSandbox(ctx, early.ID)
	early.Files, early.FilesGen = "", 0
	if err := c.st.UpdateSandbox(ctx, early); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetNodeDraining(ctx, "node-b", true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.sh(t, "early", "true"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node-b") {
		t.Fatalf("exec of a sandbox whose files are only on the drained node-b: %v; want the other-node refusal", err)
	}
	if err := b.lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	b.WatchNodes(ctx) // node-b learnt of its drain
	if out, err := a.sh(t, "early", "cat f"); err != nil || out != "early\n" {
		t.Fatalf("exec through node-a once drained node-b uploaded its files: %q, %v; want its file", out, err)
	}
	if out, err := a.sh(t, "moved", "cat home/f"); err != nil || out != "kept\n" {
		t.Fatalf("exec through node-a once node-b is drained: %q, %v; want the file written on node-b", out, err)
	}
	sb, _ := a.Resolve(ctx, "alice", "moved")
	if sb.Node != "node-a" || sb.Generation != moved.Generation+1 || sb.State != Running {
		t.Fatalf("after the move: node %s, generation %d, %s; want node-a, generation %d, running", sb.Node, sb.Generation, sb.State, moved.Generation+1)
	}
	if _, err := a.SetNodeDraining(ctx, "node-b", false); err != nil {
		t.Fatal(err)
	}
	if err := b.lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}

	_, gone, err := b.Create(ctx, alice, CreateRequest{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	b.sh(t, "gone", "mkdir -p home && echo before > home/f")
	_, sus, err := b.Suspend(ctx, alice, "gone")
	if err != nil {
		t.Fatal(err)
	}
	c.clock.add(time.Second)
	b.sh(t, "gone", "echo after > home/f") // resumes it on node-b
	c.clock.add(3 * leasePeriod)
	if err := a.lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	a.WatchNodes(ctx)
	b.stop() // node-b is down; its state directory stays
	op, sb, err := a.Resume(ctx, alice, "gone")
	if err != nil {
		t.Fatalf("resume the lost sandbox through node-a: %v", err)
	}
	var mv Move
	json.Unmarshal(op.Result, &mv)
	want := "changes since " + stamp(sus.FilesAt) + " were on node node-b and are lost"
	if mv.Notice != want || mv.From != "node-b" || sb.Node != "node-a" || sb.State != Running {
		t.Fatalf("resume of the lost sandbox: %+v, sandbox on %s %s; want notice %q from node-b, running on node-a", mv, sb.Node, sb.State, want)
	}
	if out, err := a.sh(t, "gone", "cat home/f"); err != nil || out != "before\n" {
		t.Fatalf("the lost sandbox's file on node-a: %q, %v; want its last suspend's", out, err)
	}

	// node-b restarts on its state: both sandboxes are node-a's now.
	c.clock.add(time.Second)
	b2 := c.node(t, "node-b", bdir)
	ids, _ := b2.drv.List(ctx)
	for _, id := range ids {
		if id == gone.ID || id == moved.ID || id == early.ID {
			t.Errorf("node-b kept its stale copy of %s after its restart", id)
		}
	}
	if b2.drv.Running(gone.ID) || b2.drv.Running(moved.ID) {
		t.Errorf("node-b runs a sandbox node-a holds")
	}
	for _, name := range []string{"gone", "moved"} {
		if _, err := b2.sh(t, name, "true"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node-a") {
			t.Errorf("exec of %s through the restarted node-b: %v; want the refusal naming node-a", name, err)
		}
	}

	// Its files in the bucket go with a terminated sandbox.
	files := sb.Files
	if _, _, err := a.Terminate(ctx, alice, "gone"); err != nil {
		t.Fatal(err)
	}
	a.WaitCleanups(ctx)
	if _, err := a.SnapshotOwned(ctx, "alice", files); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the files of the terminated sandbox: %v; want them deleted", err)
	}
}
