package membership

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// clock is a fake clock that tests move by hand.
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

const period = 5 * time.Second

func openStore(t *testing.T) store.Store {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func acquire(t *testing.T, st store.Store, c *clock, name, inst, addr string, reserved Reserved) (*Lease, error) {
	t.Helper()
	return Acquire(context.Background(), st, Config{Name: name, Instance: inst, Address: addr, Period: period, Now: c.now,
		Capacity: store.Resources{Memory: 4 << 30, CPUs: 2, Sandboxes: 4096}}, reserved, nil)
}

func stateOf(t *testing.T, l *Lease, name string) NodeInfo {
	t.Helper()
	list, err := l.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("node %s not listed in %+v", name, list)
	return NodeInfo{}
}

// A node renewing keeps its name; a second instance cannot take it while it lives;
// once two periods pass without a renewal it is lost, another instance takes the
// name, and the first is fenced off and places nothing.
func TestLeaseLapsesAfterTwoPeriods(t *testing.T) {
	ctx := context.Background()
	st, c := openStore(t), &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	a, err := acquire(t, st, c, "n1", "ia", "10.0.0.1:7443", func(context.Context) (store.Resources, error) {
		return store.Resources{Memory: 1 << 30, CPUs: 1, Sandboxes: 1}, nil
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	other, err := acquire(t, st, c, "n2", "ib", "10.0.0.2:7443", nil)
	if err != nil {
		t.Fatalf("Acquire n2: %v", err)
	}
	for range 3 {
		c.add(period)
		if err := a.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	if n := stateOf(t, other, "n1"); n.State != store.NodeReady || n.Reserved.Memory != 1<<30 || n.Self {
		t.Fatalf("n1 as n2 sees it after renewals: %+v, want ready with 1GiB reserved", n)
	}
	_, err = acquire(t, st, c, "n1", "ib", "10.0.0.2:7443", nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "10.0.0.1:7443") {
		t.Fatalf("a second instance taking n1: %v; want a refusal naming the holder", err)
	}
	c.add(2*period - time.Nanosecond)
	if n := stateOf(t, other, "n1"); n.State != store.NodeReady {
		t.Fatalf("n1 just under two periods after its renewal: %s, want ready", n.State)
	}
	c.add(time.Nanosecond)
	if n := stateOf(t, other, "n1"); n.State != store.NodeLost {
		t.Fatalf("n1 two periods after its renewal: %s, want lost", n.State)
	}
	if err := a.Placeable(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Placeable with a lapsed lease: %v, want ErrUnavailable", err)
	}
	b, err := acquire(t, st, c, "n1", "ib", "10.0.0.2:7443", nil)
	if err != nil {
		t.Fatalf("taking over a lost node's name: %v", err)
	}
	if err := a.Renew(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Renew after the takeover: %v, want ErrUnavailable", err)
	}
	if err := a.Placeable(); err == nil {
		t.Fatal("the fenced-off node still places sandboxes")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close of the fenced-off node: %v", err)
	}
	if n := stateOf(t, b, "n1"); n.State != store.NodeReady || n.Address != "10.0.0.2:7443" || n.Epoch != 2 || !n.Self {
		t.Fatalf("n1 after the takeover: %+v; want ready at the new address, epoch 2, itself", n)
	}
}

// A drain stops placement on the drained node, at once on itself and at the next
// renewal elsewhere; a clean Close reads as stopped and frees the name at once.
func TestDrainAndCleanStop(t *testing.T) {
	ctx := context.Background()
	st, c := openStore(t), &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	a, err := acquire(t, st, c, "n1", "ia", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := acquire(t, st, c, "n2", "ib", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Placeable(); err != nil {
		t.Fatalf("Placeable of a ready node: %v", err)
	}
	if _, err := b.SetDraining(ctx, "n1", true); err != nil {
		t.Fatalf("SetDraining from another node: %v", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	err = a.Placeable()
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"n1" is draining`) {
		t.Fatalf("Placeable of a drained node: %v; want a refusal naming its state", err)
	}
	if n, err := a.SetDraining(ctx, "n1", false); err != nil || n.State != store.NodeReady || a.Placeable() != nil {
		t.Fatalf("undrain = %+v, %v; want ready and placing at once", n, err)
	}
	if _, err := a.SetDraining(ctx, "nope", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("draining an unknown node: %v, want ErrNotFound", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := stateOf(t, b, "n1"); n.State != store.NodeStopped {
		t.Fatalf("n1 after a clean stop: %s, want stopped", n.State)
	}
	if _, err := acquire(t, st, c, "n1", "ic", "", nil); err != nil {
		t.Fatalf("taking a cleanly stopped node's name: %v", err)
	}
}

// TestRenewWritesPlacementFacts: the record carries the node's labels and runtimes from
// the start, and each renewal the images it holds now, at most store.MaxNodeImages.
func TestRenewWritesPlacementFacts(t *testing.T) {
	st, c := openStore(t), &clock{t: time.Unix(1000, 0)}
	var mu sync.Mutex
	held := []string{"sha256:a"}
	l, err := Acquire(t.Context(), st, Config{Name: "n1", Instance: "i1", Period: period, Now: c.now,
		Labels: map[string]string{"zone": "a"}, Runtimes: func() []string { return []string{"runc", "runsc"} },
		Images: func() []string { mu.Lock(); defer mu.Unlock(); return held }}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := stateOf(t, l, "n1")
	if n.Labels["zone"] != "a" || strings.Join(n.Runtimes, ",") != "runc,runsc" || strings.Join(n.Images, ",") != "sha256:a" {
		t.Fatalf("after acquire: labels %v runtimes %v images %v", n.Labels, n.Runtimes, n.Images)
	}
	mu.Lock()
	held = make([]string, store.MaxNodeImages+10)
	for i := range held {
		held[i] = "sha256:" + strings.Repeat("b", i%7+1)
	}
	mu.Unlock()
	c.add(period)
	if err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := stateOf(t, l, "n1"); len(n.Images) != store.MaxNodeImages || n.Labels["zone"] != "a" {
		t.Fatalf("after renew: %d images, labels %v; want %d images, labels kept", len(n.Images), n.Labels, store.MaxNodeImages)
	}
}
