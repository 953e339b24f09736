package manager

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// newFake is a fake driver in a directory of the test's own; the sandboxes the test left
// running stop when it ends.
func newFake(t testing.TB) *fake.Driver {
	t.Helper()
	d, err := fake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, _ := d.List(context.Background())
		for _, id := range ids {
			d.Stop(context.Background(), id)
		}
	})
	return d
}

func newTestManager(t *testing.T) (*Manager, *fake.Driver, store.Store) {
	t.Helper()
	fd := newFake(t)
	m, st := newManagerWith(t, DefaultConfig(), fd)
	return m, fd, st
}

// newManagerWith builds a manager with cfg and driver drv over a fresh store.
func newManagerWith(t testing.TB, cfg Config, drv runtime.Driver) (*Manager, store.Store) {
	t.Helper()
	return newManagerIn(t, t.TempDir(), cfg, drv)
}

// newManagerIn builds a manager with cfg and driver drv over a fresh store in dir,
// whose database file is dir/db.
func newManagerIn(t testing.TB, dir string, cfg Config, drv runtime.Driver) (*Manager, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	imgs, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	m := New(cfg, st, drv, imgs, nil)
	t.Cleanup(func() { m.Close() })
	return m, st
}

var local = Call{Owner: "local"}

func TestCreateRefusesBadInputAndChangesNothing(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	cases := []struct {
		name string
		req  CreateRequest
		want error
	}{
		{"uppercase name", CreateRequest{Name: "Bad"}, errdefs.ErrInvalidArgument},
		{"leading dash", CreateRequest{Name: "-a"}, errdefs.ErrInvalidArgument},
		{"too long", CreateRequest{Name: string(make([]byte, 64))}, errdefs.ErrInvalidArgument},
		{"id prefix", CreateRequest{Name: "sb_x"}, errdefs.ErrInvalidArgument},
		{"unknown image", CreateRequest{Name: "a", Image: "nope"}, errdefs.ErrNotFound},
		{"negative cpu", CreateRequest{Name: "a", Limits: store.Limits{CPU: -1}}, errdefs.ErrInvalidArgument},
		{"absurd cpu", CreateRequest{Name: "a", Limits: store.Limits{CPU: 1000}}, errdefs.ErrInvalidArgument},
		{"tiny memory", CreateRequest{Name: "a", Limits: store.Limits{Memory: 1}}, errdefs.ErrInvalidArgument},
		{"bad env", CreateRequest{Name: "a", Env: map[string]string{"1X": "y"}}, errdefs.ErrInvalidArgument},
		{"bad label", CreateRequest{Name: "a", Labels: map[string]string{"": "y"}}, errdefs.ErrInvalidArgument},
		{"bad lifetime", CreateRequest{Name: "a", MaxLifetime: "1s"}, errdefs.ErrInvalidArgument},
	}
	for _, c := range cases {
		_, _, err := m.Create(ctx, local, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v; want %v", c.name, err, c.want)
		}
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 0 {
		t.Errorf("bad input left %d sandboxes", len(list))
	}
	if ops, _ := st.ListOperations(ctx, store.OperationFilter{}); len(ops) != 0 {
		t.Errorf("bad input left %d operations", len(ops))
	}
	if ids, _ := fd.List(ctx); len(ids) != 0 {
		t.Errorf("bad input made host resources %v", ids)
	}
}

func TestCreateRollsBackAFailedStart(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	fd.FailNextStart(errors.New("runc exploded"))
	op, _, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v; want unavailable", err)
	}
	if op == nil || op.State != store.OpFailed {
		t.Fatalf("op = %+v; want a failed operation", op)
	}
	if ids, _ := fd.List(ctx); len(ids) != 0 {
		t.Errorf("rollback left host resources %v", ids)
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 0 {
		t.Errorf("rollback left a record: %+v", list[0])
	}
	// The name is free again.
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); err != nil {
		t.Fatalf("create after rollback: %v", err)
	}
}

func TestIdempotencyAndIfMatch(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	c := Call{Owner: "local", IdempotencyKey: "k1"}
	op1, sb1, err := m.Create(ctx, c, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	op2, sb2, err := m.Create(ctx, c, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if op2.ID != op1.ID || sb2.ID != sb1.ID {
		t.Errorf("replay gave op %s sandbox %s; want %s %s", op2.ID, sb2.ID, op1.ID, sb1.ID)
	}
	if _, _, err := m.Create(ctx, c, CreateRequest{Name: "b"}); !errors.Is(err, errdefs.ErrIdempotencyConflict) {
		t.Errorf("same key, other body: err = %v; want idempotency conflict", err)
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate name: err = %v; want already exists", err)
	}
	stale := Call{Owner: "local", IfMatch: sb1.Version - 1}
	if _, _, err := m.Terminate(ctx, stale, "a"); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Errorf("stale If-Match: err = %v; want version conflict", err)
	}
	if got, _ := m.Resolve(ctx, "local", "a"); got.State != Running {
		t.Errorf("after a refused terminate the state is %s; want running", got.State)
	}
	if _, sb, err := m.Terminate(ctx, Call{Owner: "local", IfMatch: sb1.Version}, "a"); err != nil || sb.State != Terminated {
		t.Fatalf("terminate: %v, %+v", err, sb)
	}
	if _, err := m.Resolve(ctx, "other", sb1.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another owner resolved the sandbox: %v", err)
	}
}

func TestRecover(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	_, keep, _ := m.Create(ctx, local, CreateRequest{Name: "keep"})
	_, dead, _ := m.Create(ctx, local, CreateRequest{Name: "dead"})
	_, expired, _ := m.Create(ctx, local, CreateRequest{Name: "expired", MaxLifetime: "1m"})
	fd.Stop(ctx, dead.ID) // their containers ended while "the daemon was down"
	fd.Stop(ctx, expired.ID)
	half := &store.Sandbox{ID: "sb_half", Name: "half", Owner: "local", State: Creating, UIDBase: 1 << 29}
	if err := st.CreateSandbox(ctx, half); err != nil {
		t.Fatal(err)
	}
	fd.PlantLeftover("sb_half")
	fd.PlantLeftover("sb_orphan")
	stuck := &store.Operation{ID: "op_stuck", Kind: "create", Owner: "local", State: store.OpRunning}
	if _, err := st.CreateOperation(ctx, stuck); err != nil {
		t.Fatal(err)
	}

	m2 := New(DefaultConfig(), st, fd, m.images, nil)
	t.Cleanup(func() { m2.Close() })
	m2.SetClock(func() time.Time { return time.Now().Add(2 * time.Minute) })
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	m2.WaitCleanups(ctx)
	if got, _ := st.GetSandbox(ctx, keep.ID); got.State != Running {
		t.Errorf("live sandbox state = %s; want running (reattached)", got.State)
	}
	if got, _ := st.GetSandbox(ctx, dead.ID); got.State != Suspended {
		t.Errorf("sandbox whose container ended = %s; want suspended (its upper layer kept)", got.State)
	}
	if got, _ := st.GetSandbox(ctx, expired.ID); got.State != Terminated || got.Failure == "" {
		t.Errorf("expired sandbox = %s (%q); want terminated with a reason", got.State, got.Failure)
	}
	if _, err := st.GetSandbox(ctx, "sb_half"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("interrupted create still has a record (err %v)", err)
	}
	ids, _ := fd.List(ctx)
	if want := []string{keep.ID, dead.ID}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Errorf("host resources after recover = %v; want %v (the live one and the suspended one's upper layer)", ids, want)
	}
	if op, _ := st.GetOperation(ctx, "op_stuck"); op.State != store.OpFailed {
		t.Errorf("interrupted operation state = %s; want failed", op.State)
	}
	// The slot of the live sandbox stays taken.
	base, _ := m2.allocSlot("sb_new")
	if base == keep.UIDBase {
		t.Errorf("recovered manager handed out a uid range still in use")
	}
}

func TestTransitions(t *testing.T) {
	cases := []struct {
		from, to State
		ok       bool
	}{
		{Creating, Running, true}, {Running, Terminating, true}, {Terminating, Terminated, true},
		{Running, Suspending, true}, {Suspended, Resuming, true}, {Suspended, Terminated, true}, {Running, Terminated, true},
		{Terminated, Running, false}, {Suspended, Running, false}, {Creating, Suspended, false},
	}
	for _, c := range cases {
		err := transition(c.from, c.to)
		if (err == nil) != c.ok {
			t.Errorf("%s -> %s: err = %v; want allowed=%v", c.from, c.to, err, c.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s -> %s: error is not a failed precondition", c.from, c.to)
		}
	}
}

var nameOracle = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "demo-1", "-a", "A", "sb_1", "a--b", "", "ä"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		// Past the 63 bytes allowed, longer names reach nothing new and take long to
		// minimize.
		if len(name) > 80 {
			return
		}
		err := ValidateName(name)
		ok := nameOracle.MatchString(name) && len(name) <= 63
		if (err == nil) != ok {
			t.Fatalf("ValidateName(%q) = %v; oracle says valid=%v", name, err, ok)
		}
	})
}

// An operation that fails for an internal reason records and answers a message that
// names the operation, never the cause, and its replay answers the same.
func TestInternalFailureKeepsItsCauseInTheLog(t *testing.T) {
	m, _, _ := newTestManager(t)
	op := &store.Operation{ID: "op_test", Kind: "create"}
	err := m.finishOp(op, "", errors.New("sqlite: open /var/lib/airlock/airlock.db: disk I/O error"))
	msg := errdefs.Message(err)
	if code := errdefs.Code(err); code != "internal" || strings.Contains(msg, "/var/lib") || !strings.Contains(msg, "op_test") {
		t.Fatalf("the failure answered %s %q; want internal, naming the operation and no host path", code, msg)
	}
	if op.ErrorMessage != msg || errdefs.Details(err)["operation_id"] != "op_test" {
		t.Fatalf("recorded %q, answered %q with details %v; want the same message and the operation id", op.ErrorMessage, msg, errdefs.Details(err))
	}
	_, _, replay := m.replayed(context.Background(), op)
	if errdefs.Message(replay) != msg {
		t.Fatalf("the replay answered %q, the first answer %q", errdefs.Message(replay), msg)
	}
}

// A sandbox found dead during a call a plane makes through Work (a session, a file, a
// process) is recorded as a dead exec would be: suspended, with its event.
func TestAgentCallNoticesADeadContainer(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	w, err := m.Work(ctx, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	sb := w.Sandbox()
	fd.Stop(ctx, sb.ID)
	_, err = w.ListSessions(ctx)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "no longer running") {
		t.Fatalf("ListSessions = %v; want unavailable, no longer running", err)
	}
	got, _ := st.GetSandbox(ctx, sb.ID)
	if got.State != Suspended {
		t.Fatalf("state = %s; want suspended", got.State)
	}
	evs, _ := st.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	if !slices.ContainsFunc(evs, func(ev *store.Event) bool { return ev.Type == "container_gone" }) {
		t.Errorf("no container_gone event among %d events", len(evs))
	}
}

// A call the agent client refuses before it reaches the sandbox (input past what one
// call takes) is the caller's error, not the sandbox's: invalid, and the sandbox runs on.
func TestWorkKeepsBadInputTheCallers(t *testing.T) {
	m, _, st := newTestManager(t)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	w, err := m.Work(ctx, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	err = w.ProcInput(ctx, 1, "", make([]byte, agentproto.MaxPayload+1))
	if code := errdefs.Code(err); code != "invalid_argument" || !strings.Contains(errdefs.Message(err), "more than one call takes") {
		t.Errorf("input past one call's bound: %q (%s); want invalid_argument saying the bound", errdefs.Message(err), code)
	}
	if got, _ := st.GetSandbox(ctx, w.Sandbox().ID); got.State != Running {
		t.Errorf("after refused input the sandbox is %s; want running", got.State)
	}
}

// A create names its runtime: the record keeps it, the sandbox runs on that driver (and
// its forks on their parent's), an unknown name is refused with the node's list, and a
// record naming a runtime the node lacks is never handed to another.
func TestRuntimesByName(t *testing.T) {
	m, fd, st := newTestManager(t)
	other := newFake(t)
	m.AddRuntime("other", other)
	ctx := context.Background()
	if got := m.Runtimes(); !slices.Equal(got, []string{"runc", "other"}) {
		t.Fatalf("Runtimes() = %v; want the default first", got)
	}
	_, _, err := m.Create(ctx, local, CreateRequest{Name: "x", Runtime: "kata"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(errdefs.Message(err), `"kata"`) || !strings.Contains(errdefs.Message(err), "other") {
		t.Fatalf("unknown runtime: %v; want invalid, naming it and the node's runtimes", err)
	}
	_, a, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := m.Create(ctx, local, CreateRequest{Name: "b", Runtime: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Runtime != "runc" || b.Runtime != "other" {
		t.Fatalf("records name runtimes %q and %q; want runc and other", a.Runtime, b.Runtime)
	}
	if ids, _ := fd.List(ctx); !slices.Equal(ids, []string{a.ID}) {
		t.Errorf("default driver runs %v; want only %s", ids, a.ID)
	}
	if ids, _ := other.List(ctx); !slices.Equal(ids, []string{b.ID}) {
		t.Errorf("other driver runs %v; want only %s", ids, b.ID)
	}
	got, _ := st.GetSandbox(ctx, b.ID)
	got.Runtime = "gone"
	if err := m.driver(got).Stop(ctx, got.ID); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a record naming a missing runtime: %v; want unavailable", err)
	}
}

// stopRecorder is the fake driver, noting every Stop.
type stopRecorder struct {
	*fake.Driver
	mu      sync.Mutex
	stopped []string
}

func (d *stopRecorder) Stop(ctx context.Context, id string) error {
	d.mu.Lock()
	d.stopped = append(d.stopped, id)
	d.mu.Unlock()
	return d.Driver.Stop(ctx, id)
}

// TestRecoverReleasesInterruptedStorage: a suspended sandbox whose snapshot a crash
// interrupted (its disk mounted for the while) has its storage let go by recovery;
// a suspended sandbox with nothing in flight is not touched.
func TestRecoverReleasesInterruptedStorage(t *testing.T) {
	drv := &stopRecorder{Driver: newFake(t)}
	m, st := newManagerWith(t, DefaultConfig(), drv)
	ctx := context.Background()
	var ids []string
	for _, name := range []string{"snapped", "idle"} {
		_, sb, err := m.Create(ctx, local, CreateRequest{Name: name})
		if err == nil {
			_, _, err = m.Suspend(ctx, local, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if _, err := st.CreateOperation(ctx, &store.Operation{ID: "op_snap", Kind: "snapshot", Owner: "local", SandboxID: ids[0], State: store.OpRunning}); err != nil {
		t.Fatal(err)
	}
	drv.stopped = nil
	m2 := New(DefaultConfig(), st, drv, m.images, nil)
	t.Cleanup(func() { m2.Close() })
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(drv.stopped, ids[:1]) {
		t.Errorf("recovery stopped %v; want the storage of %v (the interrupted snapshot's) let go, and no other", drv.stopped, ids[:1])
	}
	if op, _ := st.GetOperation(ctx, "op_snap"); op.State != store.OpFailed {
		t.Errorf("interrupted snapshot is %s; want failed", op.State)
	}
}

// A process's working directory, when given, is absolute, whichever kind of process:
// a relative one is refused before the sandbox is reached, saying what is allowed.
func TestProcessCwdIsAbsolute(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "cwd"}); err != nil {
		t.Fatal(err)
	}
	const want = `invalid working directory "rel": give an absolute path inside the sandbox, such as /home/user`
	_, execErr := m.Exec(ctx, "local", "cwd", ExecRequest{Argv: []string{"true"}, Cwd: "rel"}, io.Discard, io.Discard)
	_, sessErr := m.StartSession(ctx, "local", "cwd", agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"true"}, Cwd: "rel"})
	_, ptyErr := m.OpenTerminal(ctx, "local", "cwd", agentproto.ExecSpec{Argv: []string{"true"}, Cwd: "rel", Rows: 24, Cols: 80})
	w, err := m.Work(ctx, "local", "cwd")
	if err != nil {
		t.Fatal(err)
	}
	_, procErr := w.StartProc(ctx, agentproto.ProcSpec{Argv: []string{"true"}, Cwd: "rel"})
	for name, err := range map[string]error{"exec": execErr, "session": sessErr, "terminal": ptyErr, "process": procErr} {
		if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != want {
			t.Errorf("%s with cwd rel: %v; want %q", name, err, want)
		}
	}
}
