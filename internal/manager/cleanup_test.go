package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fakenet "github.com/airlockhq/airlock/internal/netattach/fake"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
)

// heldDelete is the fake driver whose Delete waits while the test holds it, and fails
// while the test says so.
type heldDelete struct {
	*fake.Driver
	mu   sync.Mutex
	gate chan struct{} // Delete waits for it to close; nil: no wait
	fail error
}

func (d *heldDelete) Delete(ctx context.Context, id string) error {
	d.mu.Lock()
	gate, fail := d.gate, d.fail
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	return d.Driver.Delete(ctx, id)
}

func (d *heldDelete) set(gate chan struct{}, fail error) {
	d.mu.Lock()
	d.gate, d.fail = gate, fail
	d.mu.Unlock()
}

// terminateSoon terminates ref, failing the test if the answer does not come while the
// driver's Delete is held (it would wait for the cleanup).
func terminateSoon(t *testing.T, m *Manager, ref string) *store.Sandbox {
	t.Helper()
	type answer struct {
		sb  *store.Sandbox
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		_, sb, err := m.Terminate(context.Background(), local, ref)
		ch <- answer{sb, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("terminate %s: %v", ref, a.err)
		}
		return a.sb
	case <-time.After(30 * time.Second):
		t.Fatalf("terminate %s did not answer while the removal of its resources was held: it waits for the cleanup", ref)
	}
	return nil
}

// TestTerminateAcksBeforeCleanup: a terminate answers once the sandbox is a tombstone
// whose processes are killed, while its resources (container directory, network, uid
// range) are still being removed; the name can be used again at once by a sandbox that
// gets other resources; the cleanup is on record and visible until it is done.
func TestTerminateAcksBeforeCleanup(t *testing.T) {
	drv := &heldDelete{Driver: newFake(t)}
	m, st := newManagerWith(t, DefaultConfig(), drv)
	net := fakenet.New()
	m.SetNetwork(net)
	ctx := context.Background()
	_, old, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	drv.set(gate, nil)
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()

	sb := terminateSoon(t, m, "a")
	if sb.State != Terminated {
		t.Errorf("terminate answered with state %s; want terminated", sb.State)
	}
	if drv.Running(old.ID) {
		t.Errorf("the sandbox's processes still run after terminate answered")
	}
	if ids, _ := drv.List(ctx); !slices.Contains(ids, old.ID) {
		t.Errorf("the container directory is gone at the answer (%v): the test's hold on Delete did not work", ids)
	}
	pending, err := m.Cleanups(ctx)
	if err != nil || len(pending) != 1 || pending[0].SandboxID != old.ID {
		t.Fatalf("pending cleanups at the answer = %+v (%v); want the one of %s", pending, err, old.ID)
	}
	if h := m.Health(ctx, "", nil); !slices.ContainsFunc(h.Checks, func(c runtime.Check) bool {
		return c.Name == "cleanups" && strings.HasPrefix(c.Detail, "1 pending")
	}) {
		t.Errorf("node health does not show the pending cleanup: %+v", h.Checks)
	}
	if leftovers, err := m.GC(ctx, true); err != nil || len(leftovers) != 1 || leftovers[0].SandboxID != old.ID ||
		!strings.Contains(leftovers[0].Reason, "cleanup is pending") {
		t.Errorf("gc --dry-run = %+v (%v); want the pending cleanup of %s", leftovers, err, old.ID)
	}

	// The same name at once: a new sandbox, with its own id and uid range.
	_, fresh, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatalf("create of the name again while the old one's cleanup is pending: %v", err)
	}
	if fresh.ID == old.ID || fresh.UIDBase == old.UIDBase {
		t.Errorf("new sandbox %s (uid base %d) shares the id or uid range of the one being cleaned, %s (%d)", fresh.ID, fresh.UIDBase, old.ID, old.UIDBase)
	}
	if _, ok := net.Sandbox(old.ID); !ok {
		t.Errorf("the old sandbox's network is gone before its cleanup ran")
	}

	close(gate)
	if err := m.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := drv.List(ctx); slices.Contains(ids, old.ID) || !slices.Contains(ids, fresh.ID) {
		t.Errorf("driver resources after the cleanup = %v; want %s's and not %s's", ids, fresh.ID, old.ID)
	}
	if _, ok := net.Sandbox(old.ID); ok {
		t.Errorf("the old sandbox's network outlived its cleanup")
	}
	if _, ok := net.Sandbox(fresh.ID); !ok {
		t.Errorf("the old sandbox's cleanup took the network of the new one of the same name")
	}
	if pending, _ := m.Cleanups(ctx); len(pending) != 0 {
		t.Errorf("pending cleanups after it ran: %+v", pending)
	}
	m.mu.Lock()
	holder := m.slots[old.UIDBase]
	m.mu.Unlock()
	if holder != "" {
		t.Errorf("the old sandbox's uid range is still held by %q after its cleanup", holder)
	}
	ops, _ := st.ListOperations(ctx, store.OperationFilter{})
	for _, op := range ops {
		if op.Kind == cleanupKind && op.State != store.OpSucceeded {
			t.Errorf("cleanup operation %s is %s after the cleanup; want succeeded", op.ID, op.State)
		}
	}
}

// TestCleanupFailureIsVisibleAndResumedAfterRestart: a cleanup that fails stays on
// record (the operation says so, health is not OK, gc shows why), keeps its image in
// use and the uid range
// taken across a restart, and the next start finishes it; a terminate the daemon died
// in the middle of (recorded, not yet killed) is finished by the next start too.
func TestCleanupFailureIsVisibleAndResumedAfterRestart(t *testing.T) {
	drv := &heldDelete{Driver: newFake(t)}
	m, st := newManagerWith(t, DefaultConfig(), drv)
	ctx := context.Background()
	_, failing, err := m.Create(ctx, local, CreateRequest{Name: "failing"})
	if err != nil {
		t.Fatal(err)
	}
	drv.set(nil, errors.New("device or resource busy"))
	terminateSoon(t, m, "failing")
	if err := m.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	pending, _ := m.Cleanups(ctx)
	if len(pending) != 1 || pending[0].Attempts != 1 || !strings.Contains(pending[0].LastError, "busy") {
		t.Fatalf("after a failed cleanup the pending ones are %+v; want %s's with 1 failed attempt and its error", pending, failing.ID)
	}
	op, _ := st.GetOperation(ctx, pending[0].Operation)
	if op.State != store.OpRunning || op.ErrorMessage == "" {
		t.Errorf("the failed cleanup's operation is %s with message %q; want running with a message", op.State, op.ErrorMessage)
	}
	if h := m.Health(ctx, "", nil); !slices.ContainsFunc(h.Checks, func(c runtime.Check) bool { return c.Name == "cleanups" && !c.OK }) {
		t.Errorf("node health is OK about a failed cleanup: %+v", h.Checks)
	}
	if users := m.ImageUsers(ctx, "someone")(failing.ImageDigest); !slices.Contains(users, local.Owner) {
		t.Errorf("the image of a sandbox whose cleanup is pending has users %v; want its owner (its root may still be mounted on it)", users)
	}
	// The daemon dies in the middle of terminating "half": the cleanup is recorded,
	// nothing else is done.
	half := interruptedTerminate(t, m, "half", false)

	// The resumed cleanups wait at Delete until the ranges are read: one that ran at
	// once would free its range before the check.
	gate := make(chan struct{})
	drv.set(gate, nil)
	m2 := New(DefaultConfig(), st, drv, m.images, nil)
	t.Cleanup(func() { m2.Close() })
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // runs before m2.Close, even when the test fails before the check
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	m2.mu.Lock()
	holders := []string{m2.slots[failing.UIDBase], m2.slots[half.UIDBase]}
	m2.mu.Unlock()
	open()
	if err := m2.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	if holders[0] != failing.ID {
		t.Errorf("after the restart, the uid range of %s (cleanup pending) is held by %q; want it held until the cleanup", failing.ID, holders[0])
	}
	checkRecovered(t, m2, drv.Driver, half.ID, failing.ID)
}

// interruptedTerminate creates sandbox name and does what a terminate does before a
// daemon dies: records its cleanup and, with terminating, records it terminating
// (the terminate's first write).
func interruptedTerminate(t *testing.T, m *Manager, name string, terminating bool) *store.Sandbox {
	t.Helper()
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = m.store.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	record := m.recordCleanup
	if terminating { // the terminate's first write: the cleanup with the state
		record = func(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
			return m.recordTerminating(ctx, sb, "terminate")
		}
	}
	if _, err := record(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.store.GetSandbox(ctx, sb.ID); terminating && got.State != Terminating {
		t.Fatalf("the interrupted terminate recorded %s; want terminating", got.State)
	}
	return sb
}

// checkRecovered fails t unless, after m's recovery and cleanups, every sandbox of ids
// is terminated, the first (whose terminate was interrupted) runs no more, and nothing
// is left in the driver or pending.
func checkRecovered(t *testing.T, m *Manager, drv *fake.Driver, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if got, _ := m.store.GetSandbox(ctx, id); got.State != Terminated {
			t.Errorf("sandbox %s after recovery is %s; want terminated", id, got.State)
		}
	}
	if drv.Running(ids[0]) {
		t.Errorf("the sandbox whose terminate was interrupted still runs after recovery")
	}
	if left, _ := drv.List(ctx); len(left) != 0 {
		t.Errorf("driver resources after recovery finished the cleanups: %v", left)
	}
	if pending, _ := m.Cleanups(ctx); len(pending) != 0 {
		t.Errorf("pending cleanups after recovery: %+v", pending)
	}
}

// killWatch is the fake driver that notes the sandbox's recorded state when its
// processes are killed.
type killWatch struct {
	*fake.Driver
	st     store.Store
	atKill chan State
}

func (d *killWatch) Kill(ctx context.Context, id string) error {
	sb, err := d.st.GetSandbox(ctx, id)
	if err == nil {
		select {
		case d.atKill <- sb.State:
		default:
		}
	}
	return d.Driver.Kill(ctx, id)
}

// TestTerminateRecordsTerminatingBeforeKill: a terminate records the sandbox
// terminating before it kills its processes, so what the kill breaks off reads it as
// ending at once; a daemon that dies between that record and the kill finishes the
// terminate at its next start.
func TestTerminateRecordsTerminatingBeforeKill(t *testing.T) {
	drv := &killWatch{Driver: newFake(t), atKill: make(chan State, 1)}
	m, st := newManagerWith(t, DefaultConfig(), drv)
	drv.st = st
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if sb := terminateSoon(t, m, "a"); sb.State != Terminated {
		t.Fatalf("terminate answered with state %s; want terminated", sb.State)
	}
	select {
	case got := <-drv.atKill:
		if got != Terminating {
			t.Errorf("the sandbox was recorded %s when its processes were killed; want terminating", got)
		}
	default:
		t.Fatal("terminate killed no process through the driver")
	}

	// The daemon dies after the terminating record, before the kill.
	half := interruptedTerminate(t, m, "half", true)
	m2 := New(DefaultConfig(), st, drv, m.images, nil)
	t.Cleanup(func() { m2.Close() })
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, m2, drv.Driver, half.ID)
}
