package manager

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/runtime/fake"
)

// keptDriver is the fake driver with its agent connections kept, as the runc driver
// keeps them.
type keptDriver struct {
	*fake.Driver
	mu    sync.Mutex
	pools map[string]*agent.Pool
}

func (d *keptDriver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	return d.pool(id).Dial(ctx)
}

func (d *keptDriver) pool(id string) *agent.Pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pools[id]
	if p == nil {
		p = agent.NewPool(func(ctx context.Context) (net.Conn, error) { return d.Driver.DialAgent(ctx, id) })
		d.pools[id] = p
	}
	return p
}

// A connection kept for the next call is no work in progress: once its exec has
// ended, the sandbox may go idle.
func TestKeptAgentConnectionIsNoWork(t *testing.T) {
	d := &keptDriver{Driver: newFake(t), pools: map[string]*agent.Pool{}}
	m, _ := newManagerWith(t, DefaultConfig(), d)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	id := mustResolve(t, m, "kept")
	t.Cleanup(func() { d.pool(id).Close() })
	for range 3 {
		res, err := m.Exec(ctx, "local", "kept", ExecRequest{Argv: []string{"true"}}, nil, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v, %v", res, err)
		}
	}
	if n := d.pool(id).Idle(); n != 1 {
		t.Fatalf("the pool holds %d idle connections after 3 execs, want 1 kept", n)
	}
	if m.busy(id) {
		t.Error("the sandbox counts as busy with only a kept connection open")
	}
}
