package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
)

// slowStart holds each container start a moment, so that concurrent creates overlap
// between their admission and their record.
type slowStart struct{ *fake.Driver }

func (d slowStart) Start(ctx context.Context, s runtime.Spec) error {
	time.Sleep(20 * time.Millisecond)
	return d.Driver.Start(ctx, s)
}

// TestAdmissionNeverOvercommits: concurrent creates on a node of 1GiB, each asking for
// 256MiB, make exactly four sandboxes; every other is refused naming the memory asked
// and free. A suspended sandbox holds no memory; resuming it into a full node is
// refused the same way.
func TestAdmissionNeverOvercommits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostCPU, cfg.HostMemory, cfg.NodeMemory = 2, 1<<30, 1<<30
	fd := newFake(t)
	m, st := newManagerWith(t, cfg, slowStart{fd})
	ctx := context.Background()
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = m.Create(ctx, local, CreateRequest{Name: fmt.Sprintf("s%d", i), Limits: store.Limits{Memory: 256 << 20}})
		})
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(err.Error(), "cannot hold 256MiB more memory") ||
			errdefs.Details(err)["reason"] != "node_memory":
			t.Errorf("create s%d: %v; want it created or refused for the node's memory", i, err)
		}
	}
	live, err := st.ListSandboxes(ctx, store.SandboxFilter{States: reserving})
	if err != nil {
		t.Fatal(err)
	}
	if created != 4 || len(live) != 4 {
		t.Fatalf("%d created, %d live; want exactly 4 of 256MiB on a 1GiB node", created, len(live))
	}
	if r, err := m.Reserved(ctx); err != nil || r.Memory != 1<<30 || r.Sandboxes != 4 {
		t.Fatalf("Reserved = %+v, %v; want 1GiB in 4 sandboxes", r, err)
	}
	full := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(err.Error(), "its sandboxes reserve 1GiB of its 1GiB, 0B is free") {
			t.Fatalf("%s: %v; want refused, naming what is reserved and free", what, err)
		}
	}
	_, _, err = m.Create(ctx, local, CreateRequest{Name: "more", Limits: store.Limits{Memory: 16 << 20}})
	full("create on a full node", err)

	if _, _, err := m.Suspend(ctx, local, live[0].Name); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "more", Limits: store.Limits{Memory: 256 << 20}}); err != nil {
		t.Fatalf("create after a suspend freed 256MiB: %v", err)
	}
	_, _, err = m.Resume(ctx, local, live[0].Name)
	full("resume on a full node", err)
}

// countingStore counts the calls each store method gets.
type countingStore struct {
	store.Store
	calls atomic.Int64
	names sync.Map
}

func (c *countingStore) note(name string) {
	c.calls.Add(1)
	v, _ := c.names.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (c *countingStore) ListNodes(ctx context.Context) ([]*store.Node, error) {
	c.note("ListNodes")
	return c.Store.ListNodes(ctx)
}

func (c *countingStore) ReservedByNode(ctx context.Context, states []store.State, except, nodes []string) (map[string]store.Resources, error) {
	c.note("ReservedByNode")
	return c.Store.ReservedByNode(ctx, states, except, nodes)
}

func (c *countingStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	c.note("ListSandboxes")
	return c.Store.ListSandboxes(ctx, f)
}

func (c *countingStore) GetNode(ctx context.Context, name string) (*store.Node, error) {
	c.note("GetNode")
	return c.Store.GetNode(ctx, name)
}

func (c *countingStore) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	c.note("GetSandbox")
	return c.Store.GetSandbox(ctx, id)
}

// TestPlaceWeighsEveryNode: on a shared store, Place ranks the ready nodes by the
// memory their live sandboxes leave free (read fresh from the records, not the
// leases), keeps out drained nodes and those without the runtime or labels asked for,
// and refuses naming each node's shortfall, in two store calls however many nodes
// and sandboxes there are. A node alone places on itself without reading the store.
func TestPlaceWeighsEveryNode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.SharedStore, cfg.NodeLabels = "a", true, map[string]string{"zone": "x"}
	m, st := newManagerWith(t, cfg, newFake(t))
	cs := &countingStore{Store: st}
	m.store = cs
	ctx := context.Background()
	now := time.Now()
	join := func(name string, memory int64, labels map[string]string, runtimes ...string) *membership.Lease {
		l, err := membership.Acquire(ctx, cs, membership.Config{Name: name, Instance: name, Period: time.Minute, Labels: labels,
			Capacity: store.Resources{Memory: memory, CPUs: 4}, Runtimes: func() []string { return runtimes }}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	m.SetMembership(join("a", 8<<30, map[string]string{"zone": "x"}, "runc"))
	join("b", 8<<30, map[string]string{"zone": "y"}, "runc", "runsc")
	join("c", 4<<30, map[string]string{"zone": "x"}, "runc")
	d := join("d", 64<<30, nil, "runc", "runsc")
	if _, err := d.SetDraining(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	// a holds 7GiB (1GiB free), b 1GiB of records plus a suspended one that holds none.
	for i, r := range []struct {
		node   string
		memory int64
		state  store.State
	}{{"a", 4 << 30, Running}, {"a", 3 << 30, Creating}, {"b", 1 << 30, Running}, {"b", 6 << 30, Suspended}, {"c", 1 << 30, Terminated}} {
		sb := &store.Sandbox{ID: fmt.Sprintf("sb_%d", i), Name: fmt.Sprintf("r%d", i), Owner: "o", State: r.state, Node: r.node,
			Limits: store.Limits{Memory: r.memory}, CreatedAt: now, UpdatedAt: now}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		req     PlaceRequest
		want    []string
		wantErr string
	}{
		{req: PlaceRequest{Memory: 1 << 30}, want: []string{"b", "c", "a"}},
		{req: PlaceRequest{Memory: 2 << 30}, want: []string{"b", "c"}},
		{req: PlaceRequest{Memory: 1 << 30, Runtime: "runsc"}, want: []string{"b"}},
		{req: PlaceRequest{Memory: 1 << 30, NodeSelector: map[string]string{"zone": "x"}}, want: []string{"c", "a"}},
		{req: PlaceRequest{Memory: 5 << 30, NodeSelector: map[string]string{"zone": "x"}},
			wantErr: "no node can hold 5GiB of memory, 1 CPUs, labels zone=x: a has 1GiB free, b lacks label zone=x, c has 4GiB free, d is draining"},
	} {
		before := cs.calls.Load()
		got, err := m.Place(ctx, c.req)
		if calls := cs.calls.Load() - before; calls != 2 {
			t.Errorf("Place(%+v) made %d store calls, want 2 (the nodes, and one sum of every node's reservations)", c.req, calls)
		}
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("Place(%+v) = %v, %v; want %q", c.req, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Place(%+v) = %v, %v; want %v", c.req, got, err, c.want)
		}
	}

	m.cfg.SharedStore = false
	before := cs.calls.Load()
	if got, err := m.Place(ctx, PlaceRequest{Memory: 100 << 30}); err != nil || !slices.Equal(got, []string{"a"}) || cs.calls.Load() != before {
		t.Errorf("Place alone = %v, %v after %d store calls; want [a] after none", got, err, cs.calls.Load()-before)
	}
	if _, err := m.Place(ctx, PlaceRequest{NodeSelector: map[string]string{"zone": "y"}}); err == nil || !strings.Contains(err.Error(), "a lacks label zone=y") {
		t.Errorf("Place alone with a selector this node does not match: %v; want refused naming the label", err)
	}
}

// TestCreateChecksTheNodeSelector: a create whose selector this node does not match is
// refused before anything is recorded; a malformed selector is invalid; a matching
// one is kept on the record.
func TestCreateChecksTheNodeSelector(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.NodeLabels = "a", map[string]string{"zone": "x"}
	m, st := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	_, _, err := m.Create(ctx, local, CreateRequest{Name: "s", NodeSelector: map[string]string{"zone": "y"}})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "a lacks label zone=y") {
		t.Fatalf("create with a selector this node lacks: %v", err)
	}
	_, _, err = m.Create(ctx, local, CreateRequest{Name: "s", NodeSelector: map[string]string{"-bad": "y"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "node_selector: invalid label key") {
		t.Fatalf("create with a malformed selector: %v", err)
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 0 {
		t.Fatalf("refused creates left %d records", len(list))
	}
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "s", NodeSelector: map[string]string{"zone": "x"}})
	if err != nil || sb.NodeSelector["zone"] != "x" {
		t.Fatalf("create with a matching selector: %v", err)
	}
}

// TestNodeMemoryOvercommits: node.memory above the host's lets the limits of the node's
// sandboxes sum past its physical memory, and no further.
// TestNodeAloneAdmitsPastItsMemory: a node alone (its own SQLite) with no node.memory
// keeps taking sandboxes whose limits sum past its memory, as it always did: a limit is
// a ceiling, and idle sandboxes use a few MiB each.
func TestNodeAloneAdmitsPastItsMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostCPU, cfg.HostMemory = 2, 1<<30
	m, _ := newManagerWith(t, cfg, newFake(t))
	for i := range 4 {
		if _, _, err := m.Create(context.Background(), local, CreateRequest{Name: fmt.Sprintf("s%d", i), Limits: store.Limits{Memory: 512 << 20}}); err != nil {
			t.Fatalf("create %d of 512MiB on a node alone of 1GiB: %v", i, err)
		}
	}
}

func TestNodeMemoryOvercommits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostCPU, cfg.HostMemory, cfg.NodeMemory = 2, 1<<30, 2<<30
	m, _ := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	for i := range 4 {
		if _, _, err := m.Create(ctx, local, CreateRequest{Name: fmt.Sprintf("s%d", i), Limits: store.Limits{Memory: 512 << 20}}); err != nil {
			t.Fatalf("create %d of 512MiB on a node of 2GiB (host 1GiB): %v", i, err)
		}
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "s4", Limits: store.Limits{Memory: 512 << 20}}); !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("create past node.memory: %v; want quota_exceeded", err)
	}
}
