package manager

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/store"
)

// clock is an injected clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestSuspendResumeGenerations(t *testing.T) {
	m, fd, _ := newTestManager(t)
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // suspend is idempotent
		if _, got, err := m.Suspend(ctx, local, "a"); err != nil || got.State != Suspended {
			t.Fatalf("suspend #%d: %v, %+v", i+1, err, got)
		}
	}
	if fd.Running(sb.ID) {
		t.Fatal("a suspended sandbox still has a container")
	}
	_, got, err := m.Resume(ctx, local, "a")
	if err != nil || got.State != Running || got.Generation != 2 {
		t.Fatalf("resume: %v; state %s generation %d; want running, 2", err, got.State, got.Generation)
	}
	m.Suspend(ctx, local, "a")
	// A call that touches a suspended sandbox resumes it transparently.
	if _, got, err = m.agentOf(ctx, "local", "a"); err != nil || got.State != Running || got.Generation != 3 {
		t.Fatalf("touch resume: %v; state %s generation %d; want running, 3", err, got.State, got.Generation)
	}
	m.Terminate(ctx, local, "a")
	if _, _, err := m.Resume(ctx, local, "a"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("resume of a terminated sandbox: err = %v; want failed precondition", err)
	}
}

func TestIdleSuspendTTLAndLifetime(t *testing.T) {
	m, _, st := newTestManager(t)
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.SetClock(c.now)
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "idle", IdleSuspend: "30s"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("idle_suspend below the 1m floor: err = %v; want invalid argument", err)
	}
	m.Create(ctx, local, CreateRequest{Name: "idle", IdleSuspend: "2m", TTL: "1h"})
	m.Create(ctx, local, CreateRequest{Name: "busy", IdleSuspend: "2m"})
	m.Create(ctx, local, CreateRequest{Name: "short", MaxLifetime: "5m"})
	state := func(name string) State {
		sb, err := st.GetSandboxByName(ctx, "local", name)
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	for i := 0; i < 3; i++ {
		c.add(time.Minute)
		m.Resolve(ctx, "local", "idle") // reading status is not activity
		m.agentOf(ctx, "local", "busy") // inbound traffic is
		m.Sweep(ctx)
	}
	if got := state("idle"); got != Suspended {
		t.Errorf("idle sandbox after 3m = %s; want suspended", got)
	}
	if got := state("busy"); got != Running {
		t.Errorf("busy sandbox = %s; want running", got)
	}
	c.add(3 * time.Minute) // past the 5m lifetime
	m.agentOf(ctx, "local", "busy")
	m.Sweep(ctx)
	if got := state("short"); got != Terminated {
		t.Errorf("sandbox past its max lifetime = %s; want terminated", got)
	}
	c.add(time.Hour) // past the suspended sandbox's TTL
	m.Sweep(ctx)
	if got := state("idle"); got != Terminated {
		t.Errorf("suspended sandbox past its TTL = %s; want terminated", got)
	}
}

func TestRunningExecIsActivity(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.SetClock(c.now)
	release := make(chan struct{})
	fd.SetAgent("", func(conn net.Conn) {
		if _, _, err := agentproto.ReadFrame(conn); err != nil {
			return
		}
		<-release // the command runs until the test lets it end
		b, _ := json.Marshal(agentproto.ExitResult{State: agentproto.StateSucceeded})
		agentproto.WriteFrame(conn, agentproto.FrameResult, b)
	})
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "long", IdleSuspend: "2m"}); err != nil {
		t.Fatal(err)
	}
	state := func() State {
		sb, err := st.GetSandboxByName(ctx, "local", "long")
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(ctx, "local", "long", ExecRequest{Argv: []string{"sleep", "600"}}, nil, nil)
		done <- err
	}()
	for !m.busy(mustResolve(t, m, "long")) {
		runtime.Gosched()
	}
	for i := 0; i < 10; i++ { // ten minutes of a running command and no other traffic
		c.add(time.Minute)
		m.Sweep(ctx)
	}
	if got := state(); got != Running {
		t.Fatalf("sandbox running a 10-minute exec = %s; want running", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("exec: %v", err)
	}
	c.add(time.Minute)
	m.Sweep(ctx)
	if got := state(); got != Running {
		t.Fatalf("sandbox a minute after its exec ended = %s; want running (the idle window starts when work ends)", got)
	}
	c.add(2 * time.Minute)
	m.Resolve(ctx, "local", "long") // reading status is still not activity
	m.Sweep(ctx)
	if got := state(); got != Suspended {
		t.Errorf("sandbox idle 3m after its exec = %s; want suspended", got)
	}
}

func mustResolve(t *testing.T, m *Manager, name string) string {
	t.Helper()
	sb, err := m.Resolve(context.Background(), "local", name)
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func TestLiveCap(t *testing.T) {
	m, _, _ := newTestManager(t)
	m.cfg.LiveCap = 2
	ctx := context.Background()
	m.Create(ctx, local, CreateRequest{Name: "a"})
	m.Create(ctx, local, CreateRequest{Name: "b"})
	m.Suspend(ctx, local, "b") // suspended sandboxes still count
	_, _, err := m.Create(ctx, local, CreateRequest{Name: "c"})
	if !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("create past the cap: err = %v; want quota exceeded", err)
	}
	if _, _, err := m.Create(ctx, Call{Owner: "other"}, CreateRequest{Name: "c"}); err != nil {
		t.Fatalf("another owner's create: %v", err)
	}
	m.Terminate(ctx, local, "a") // terminate frees the slot
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "c"}); err != nil {
		t.Fatalf("create after terminate: %v", err)
	}
	_ = store.OpFailed
}

// ownerLists records the filters of the store's sandbox lists that name an owner.
type ownerLists struct {
	store.Store
	mu      sync.Mutex
	filters []store.SandboxFilter
}

func (s *ownerLists) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	if f.Owner != "" {
		s.mu.Lock()
		s.filters = append(s.filters, f)
		s.mu.Unlock()
	}
	return s.Store.ListSandboxes(ctx, f)
}

// TestLiveCapReadsAtMostTheCap: a create counts its owner's live sandboxes against the
// cap by reading at most cap records (more than cap could only say the same), and
// reads none when there is no cap: an owner of thousands of sandboxes does not make
// each create read them all.
func TestLiveCapReadsAtMostTheCap(t *testing.T) {
	m, _, st := newTestManager(t)
	rec := &ownerLists{Store: st}
	m.store = rec
	ctx := context.Background()
	m.cfg.LiveCap = 2
	for _, name := range []string{"a", "b"} {
		if _, _, err := m.Create(ctx, local, CreateRequest{Name: name}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "c"}); !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("create past the cap: %v; want quota exceeded", err)
	}
	if len(rec.filters) != 3 {
		t.Fatalf("%d lists of the owner's sandboxes for 3 creates: %+v", len(rec.filters), rec.filters)
	}
	for _, f := range rec.filters {
		if f.Limit < 1 || f.Limit > m.cfg.LiveCap {
			t.Errorf("a create read its owner's sandboxes with limit %d; want at most the cap, %d", f.Limit, m.cfg.LiveCap)
		}
	}
	rec.filters = nil
	m.cfg.LiveCap = 0
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "c"}); err != nil {
		t.Fatalf("create with no cap: %v", err)
	}
	if len(rec.filters) != 0 {
		t.Errorf("a create with no cap listed its owner's sandboxes: %+v", rec.filters)
	}
}

// heldStore holds the create of one sandbox name just after its record is stored, until
// proceed is closed.
type heldStore struct {
	store.Store
	name            string
	stored, proceed chan struct{}
}

func (s *heldStore) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	err := s.Store.CreateSandbox(ctx, sb)
	if sb.Name == s.name {
		close(s.stored)
		<-s.proceed
	}
	return err
}

// TestLiveCapCountsACreateInFlightOnce: a create whose record is stored but whose cap
// reservation is not yet let go counts once against the cap, not twice, so creates up
// to the cap at once all succeed, and the one past it is still refused.
func TestLiveCapCountsACreateInFlightOnce(t *testing.T) {
	_, st := newManagerWith(t, DefaultConfig(), newFake(t))
	imgs, err := image.Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	held := &heldStore{Store: st, name: "first", stored: make(chan struct{}), proceed: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.LiveCap = 2
	m := New(cfg, held, newFake(t), imgs, nil)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "first"})
		first <- err
	}()
	<-held.stored
	_, _, err = m.Create(ctx, local, CreateRequest{Name: "second"})
	close(held.proceed)
	if err != nil {
		t.Fatalf("the second of two creates under a cap of 2, while the first is in flight with its record stored: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first create: %v", err)
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "third"}); !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("a third create under a cap of 2: err = %v; want quota exceeded", err)
	}
}

// TestLoopsLeaveOtherNodesSandboxes: on a store shared with node-b, node-a's sweep
// (idle suspension, lifetime, TTL, retried deletes) and its recovery act on its own
// sandboxes only; node-b's record is left exactly as it was.
func TestLoopsLeaveOtherNodesSandboxes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName = "node-a"
	m, st := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.SetClock(c.now)
	for _, name := range []string{"mine", "theirs", "theirs-failed"} {
		if _, _, err := m.Create(ctx, local, CreateRequest{Name: name, IdleSuspend: "2m", MaxLifetime: "5m"}); err != nil {
			t.Fatal(err)
		}
	}
	var before []*store.Sandbox
	for _, name := range []string{"theirs", "theirs-failed"} {
		sb, err := st.GetSandboxByName(ctx, "local", name)
		if err != nil {
			t.Fatal(err)
		}
		sb.Node = "node-b"
		if name == "theirs-failed" {
			sb.State = Failed // a delete node-b has yet to retry
		}
		if err := st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		before = append(before, sb)
	}
	c.add(3 * time.Minute) // past idle_suspend
	m.Sweep(ctx)
	c.add(3 * time.Minute) // past the lifetime
	m.Sweep(ctx)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if sb, _ := st.GetSandboxByName(ctx, "local", "mine"); sb.State != Terminated {
		t.Errorf("node-a's own sandbox past its lifetime = %s; want terminated", sb.State)
	}
	for _, b := range before {
		sb, err := st.GetSandbox(ctx, b.ID)
		if err != nil || sb.State != b.State || sb.Version != b.Version || sb.Node != "node-b" {
			t.Errorf("node-b's %s after node-a's loops: %+v, %v; want untouched (%s, version %d)", b.Name, sb, err, b.State, b.Version)
		}
	}
}

// TestOtherNodesSandboxIsRefusedHere: a call on this node for a sandbox another node
// holds is refused, naming that node, and changes nothing: this node has no container
// of it, and acting here would record it gone.
func TestOtherNodesSandboxIsRefusedHere(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName = "node-a"
	m, st := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "theirs"}); err != nil {
		t.Fatal(err)
	}
	sb, err := st.GetSandboxByName(ctx, "local", "theirs")
	if err != nil {
		t.Fatal(err)
	}
	sb.Node = "node-b"
	if err := st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	before, _ := st.GetSandbox(ctx, sb.ID)
	calls := map[string]func() error{
		"exec": func() error {
			_, err := m.Exec(ctx, "local", "theirs", ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
			return err
		},
		"suspend":   func() error { _, _, err := m.Suspend(ctx, local, "theirs"); return err },
		"terminate": func() error { _, _, err := m.Terminate(ctx, local, "theirs"); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `on node "node-b"`) {
			t.Errorf("%s of node-b's sandbox on node-a: %v; want a failed precondition naming node-b", name, err)
		}
	}
	after, err := st.GetSandbox(ctx, sb.ID)
	if err != nil || after.State != before.State || after.Version != before.Version {
		t.Errorf("node-b's sandbox after node-a's refusals: %+v, %v; want untouched (%s, version %d)", after, err, before.State, before.Version)
	}
}
