// Package membership owns a node's lease in the store the nodes of a cluster share: it
// acquires the node's name at start (refused while another live node holds it), renews
// the lease every period with the node's capacity and reservations, gives it back on
// Close, and answers who the nodes are and whether this one takes new sandboxes. It
// decides nothing about sandboxes and must not touch the host.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Config is one node's membership.
type Config struct {
	Name string
	// Instance identifies the node's state directory (Instance reads or makes it).
	Instance string
	// Address is where the other nodes reach this one ("": it does not listen).
	Address  string
	Capacity store.Resources
	// Labels are the operators' words on the node, which placement matches.
	Labels map[string]string
	// Runtimes and Images, if set, list the runtimes the node runs and the digests of
	// the images it holds, read at each renewal (the record keeps the first
	// store.MaxNodeImages images).
	Runtimes, Images func() []string
	// Period is how often the lease is renewed; it lasts two periods.
	Period time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Reserved reports what the node's live sandboxes reserve.
type Reserved func(context.Context) (store.Resources, error)

// NodeInfo is a node as the cluster sees it now.
type NodeInfo struct {
	store.Node
	State store.NodeState
	// Self is the node that answers.
	Self bool
}

// Lease is a node's held membership. Its methods are safe for concurrent use.
type Lease struct {
	st       store.Nodes
	cfg      Config
	reserved Reserved
	log      *slog.Logger

	mu   sync.Mutex
	rec  store.Node // as last stored
	lost error      // why the lease is no longer this node's, once a renewal is refused

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Acquire takes cfg.Name's lease, or says which live node holds it and until when. It
// renews nothing: Start does, or a test calls Renew.
func Acquire(ctx context.Context, st store.Nodes, cfg Config, reserved Reserved, log *slog.Logger) (*Lease, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Lease{st: st, cfg: cfg, reserved: reserved, log: log.With("component", "membership", "node", cfg.Name)}
	now := cfg.Now()
	n := &store.Node{Name: cfg.Name, Instance: cfg.Instance, Address: cfg.Address, Capacity: cfg.Capacity,
		Labels: cfg.Labels, Runtimes: read(cfg.Runtimes), Images: l.images(),
		LeaseExpires: now.Add(2 * cfg.Period), StartedAt: now, RenewedAt: now}
	if r, err := l.reservedNow(ctx); err == nil {
		n.Reserved = r
	}
	if err := st.AcquireNode(ctx, n, now); err != nil {
		return nil, fmt.Errorf("join the cluster as node %q: %w", cfg.Name, err)
	}
	l.rec = *n
	return l, nil
}

func (l *Lease) reservedNow(ctx context.Context) (store.Resources, error) {
	if l.reserved == nil {
		return store.Resources{}, nil
	}
	return l.reserved(ctx)
}

// images are the digests the record lists: at most store.MaxNodeImages.
func (l *Lease) images() []string {
	d := read(l.cfg.Images)
	return d[:min(len(d), store.MaxNodeImages)]
}

func read(list func() []string) []string {
	if list == nil {
		return nil
	}
	return list()
}

// Start renews the lease at once, before it returns (the node is whole now: its
// runtimes and what its recovered sandboxes reserve are known), then every half period
// until Close.
func (l *Lease) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if err := l.Renew(ctx); err != nil {
		l.log.Error("membership lease not renewed", "err", err)
	}
	l.wg.Go(func() {
		// Every half period, though the lease lasts two: a node whose renewals are held
		// back (its cores busy with a burst of creates, a slow store) still renews
		// before another node may declare it lost and fence its sandboxes.
		t := time.NewTicker(l.cfg.Period / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := l.Renew(ctx); err != nil && ctx.Err() == nil {
					l.log.Error("membership lease not renewed", "err", err)
				}
			}
		}
	})
}

// Renew extends the lease by two periods from now, with the reservations as they are,
// and learns whether the node is drained. Once another instance has taken the name
// over, every renewal fails and the node takes no new sandbox.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	n, lost := l.rec, l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	now := l.cfg.Now()
	// Reservations that cannot be counted now keep their last figure: the lease is
	// what must not lapse.
	if r, err := l.reservedNow(ctx); err == nil {
		n.Reserved = r
	} else {
		l.log.Warn("reservations not counted; the lease is renewed with the last count", "err", err)
	}
	n.LeaseExpires, n.RenewedAt = now.Add(2*l.cfg.Period), now
	n.Runtimes, n.Images = read(l.cfg.Runtimes), l.images()
	err := l.st.RenewNode(ctx, &n)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, errdefs.ErrVersionConflict) || errors.Is(err, errdefs.ErrNotFound):
		l.lost = errdefs.Unavailable("node %q no longer holds its membership lease: %v; it acts on no sandbox until it restarts", l.cfg.Name, err)
		return l.lost
	case err != nil:
		return err
	}
	l.rec = n
	return nil
}

// Close stops renewing and gives the lease back: the node reads as stopped, not lost.
func (l *Lease) Close() error {
	if l.cancel != nil {
		l.cancel()
		l.wg.Wait()
	}
	l.mu.Lock()
	n, lost := l.rec, l.lost
	l.mu.Unlock()
	if lost != nil {
		return nil // the name is another's now: nothing to give back
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.st.ReleaseNode(ctx, n.Name, n.Epoch)
}

// Name is the node's name.
func (l *Lease) Name() string { return l.cfg.Name }

// Placeable says whether new sandboxes may be placed on this node: nil when it is
// ready, or why not.
func (l *Lease) Placeable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if !l.cfg.Now().Before(l.rec.LeaseExpires) {
		return errdefs.Unavailable("node %q has not renewed its membership lease since %s; it takes no new sandbox until it does",
			l.cfg.Name, l.rec.RenewedAt.UTC().Format(time.RFC3339))
	}
	if l.rec.Draining {
		return errdefs.Precondition("node %q is %s: it takes no new sandboxes (airlock node ready %s undoes it)", l.cfg.Name, store.NodeDraining, l.cfg.Name).
			WithDetails(map[string]any{"node": l.cfg.Name, "state": string(store.NodeDraining)})
	}
	return nil
}

// Nodes lists every node of the cluster, with its state now.
func (l *Lease) Nodes(ctx context.Context) ([]NodeInfo, error) {
	list, err := l.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, 0, len(list))
	for _, n := range list {
		out = append(out, l.info(n))
	}
	return out, nil
}

func (l *Lease) info(n *store.Node) NodeInfo {
	return NodeInfo{Node: *n, State: n.StateAt(l.cfg.Now()), Self: n.Name == l.cfg.Name && n.Instance == l.cfg.Instance}
}

// SetDraining drains the node name (no new sandbox is placed on it) or makes it ready
// again. This node sees its own drain at once; another sees it at its next renewal.
func (l *Lease) SetDraining(ctx context.Context, name string, draining bool) (NodeInfo, error) {
	n, err := l.st.SetNodeDraining(ctx, name, draining)
	if err != nil {
		return NodeInfo{}, err
	}
	if n.Name == l.cfg.Name {
		l.mu.Lock()
		if n.Epoch == l.rec.Epoch {
			l.rec.Draining = n.Draining
		}
		l.mu.Unlock()
	}
	return l.info(n), nil
}

// Epoch is the epoch the node acquired its name at.
func (l *Lease) Epoch() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Epoch
}

// Held is nil while the node holds its name's lease, or says why not: once another
// instance has taken the name over, the node must not act on the sandboxes the name's
// records hold (the new holder does).
func (l *Lease) Held() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Draining says whether the node was drained, as its last renewal or drain learnt.
func (l *Lease) Draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Draining
}

// Now is the lease's clock.
func (l *Lease) Now() time.Time { return l.cfg.Now() }
