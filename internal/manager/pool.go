package manager

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// A warm pool keeps a target count of sandboxes of one image, runtime, limits and
// network mode started and never used, so that a create that asks for exactly these
// claims one (pool_claim.go) instead of building a container. Members are ordinary
// sandbox records owned by store.PoolOwner(pool): no identity can name them, they count
// against the node's capacity (uid ranges, disk) and no owner's quota, and recovery
// reattaches them like any running sandbox. One refill loop per node tends every pool:
// it retires members that no longer fit (pool removed or changed, too old, touched, not
// running) and starts at most one member at a time, waiting while creates of callers are
// under way or the node has no room, so that pools never crowd out real work.

// MaxPoolSize bounds one pool's target count.
const MaxPoolSize = 256

// memberMaxAge is how long a member waits for a claim before it is replaced: the agent
// ends a sandbox on its own at the deadline its start was given, so a member's deadline
// (the default lifetime plus this age) is at most this much later than a claim's.
const memberMaxAge = time.Hour

// refillPause is the least time between two member starts, and refillIdle how often the
// loop looks again when nothing asked it to.
var (
	refillPause = 100 * time.Millisecond
	refillIdle  = 2 * time.Second
)

// PoolRequest sets a pool.
type PoolRequest struct {
	Name    string       `json:"name"`
	Image   string       `json:"image"`
	Runtime string       `json:"runtime,omitempty"`
	Limits  store.Limits `json:"limits"`
	// Network is the members' network mode ("": the default); a claim applies the
	// caller's allow rules, which need no new interface.
	Network string `json:"network,omitempty"`
	Size    int    `json:"size"`
}

// PoolInfo is a pool and how it fares since the daemon started.
type PoolInfo struct {
	store.Pool
	Ready  int   `json:"ready"`
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// RefillLast and RefillAvg are how long the latest member start took, and the mean.
	RefillLast time.Duration `json:"refill_last"`
	RefillAvg  time.Duration `json:"refill_avg"`
}

// poolSet is the manager's pools, as the store keeps them, and their counters.
type poolSet struct {
	mu      sync.Mutex
	byName  map[string]*store.Pool
	stats   map[string]*poolStats
	cold    int           // creates of callers under way (no pool served them)
	scanned time.Time     // the refill loop's last look through every sandbox
	kick    chan struct{} // wakes the refill loop
}

type poolStats struct {
	hits, misses, refills int64
	refillLast, refillSum time.Duration
}

func (ps *poolSet) init() {
	if ps.byName == nil {
		ps.byName, ps.stats, ps.kick = map[string]*store.Pool{}, map[string]*poolStats{}, make(chan struct{}, 1)
	}
}

func (ps *poolSet) stat(name string) *poolStats {
	s := ps.stats[name]
	if s == nil {
		s = &poolStats{}
		ps.stats[name] = s
	}
	return s
}

// wake asks the refill loop to look again.
func (ps *poolSet) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// coldCreate counts a create the pools did not serve until the returned function is
// called; the refill loop waits while one is under way.
func (m *Manager) coldCreate() (done func()) {
	m.pools.mu.Lock()
	m.pools.init()
	m.pools.cold++
	m.pools.mu.Unlock()
	return func() {
		m.pools.mu.Lock()
		m.pools.cold--
		m.pools.mu.Unlock()
		m.pools.wake()
	}
}

// SetPool creates or changes a pool; its image is resolved in the caller's scope, now,
// and members run that digest. Size 0 keeps the pool with no members.
func (m *Manager) SetPool(ctx context.Context, call Call, req PoolRequest) (*PoolInfo, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, errdefs.Invalid("invalid pool name %q: a name is %s", req.Name, NameRule)
	}
	if req.Size < 0 || req.Size > MaxPoolSize {
		return nil, errdefs.Invalid("pool size %d is out of range: 0 to %d", req.Size, MaxPoolSize)
	}
	if req.Image == "" {
		req.Image = image.HostName
	}
	if err := m.checkRuntime(req.Runtime); err != nil {
		return nil, err
	}
	rt := cmp.Or(req.Runtime, m.defaultRuntime)
	if hn, ok := m.drivers[rt].(runtime.Hostnamer); !ok || !hn.RenamesHost() {
		return nil, errdefs.Invalid("runtime %q cannot rename a running sandbox, which a claim of a pool member needs; pool another runtime", rt)
	}
	limits, err := m.resolveLimits(req.Limits)
	if err != nil {
		return nil, err
	}
	net, err := normalNetwork(store.Network{Mode: cmp.Or(req.Network, DefaultNetwork.Mode)})
	if err != nil {
		return nil, err
	}
	img, err := m.images.Get(image.Scope{Owner: call.Owner}, req.Image)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.NotFound("image %q is not here: pull it first (airlock image pull %s); a pool never pulls", req.Image, req.Image)
		}
		return nil, err
	}
	now := m.now()
	p := &store.Pool{Name: req.Name, Image: req.Image, ImageDigest: img.Digest, Runtime: rt,
		Limits: limits, NetworkMode: net.Mode, Size: req.Size, CreatedAt: now, UpdatedAt: now}
	m.pools.mu.Lock()
	m.pools.init()
	if old := m.pools.byName[p.Name]; old != nil {
		p.CreatedAt = old.CreatedAt
	}
	m.pools.mu.Unlock()
	if err := m.store.PutPool(ctx, p); err != nil {
		return nil, err
	}
	m.pools.mu.Lock()
	m.pools.byName[p.Name] = p
	m.pools.mu.Unlock()
	m.pools.wake()
	return &PoolInfo{Pool: *p}, nil
}

// DeletePool removes a pool and terminates its members.
func (m *Manager) DeletePool(ctx context.Context, name string) error {
	if err := m.store.DeletePool(ctx, name); err != nil {
		return err
	}
	m.pools.mu.Lock()
	m.pools.init()
	delete(m.pools.byName, name)
	delete(m.pools.stats, name)
	m.pools.mu.Unlock()
	members, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{Owner: store.PoolOwner(name)}))
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range members {
		errs = append(errs, m.retireMember(ctx, sb.ID, "pool_removed"))
	}
	return errors.Join(errs...)
}

// Pools lists the node's pools with their counters.
func (m *Manager) Pools(ctx context.Context) ([]PoolInfo, error) {
	m.pools.mu.Lock()
	m.pools.init()
	names := slices.Collect(maps.Keys(m.pools.byName))
	m.pools.mu.Unlock()
	ready := map[string]int{}
	for _, name := range names {
		list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{Owner: store.PoolOwner(name), States: []store.State{Running}}))
		if err != nil {
			return nil, err
		}
		ready[name] = len(list)
	}
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	out := make([]PoolInfo, 0, len(m.pools.byName))
	for _, p := range m.pools.byName {
		s := m.pools.stat(p.Name)
		info := PoolInfo{Pool: *p, Ready: ready[p.Name], Hits: s.hits, Misses: s.misses, RefillLast: s.refillLast}
		if s.refills > 0 {
			info.RefillAvg = s.refillSum / time.Duration(s.refills)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b PoolInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// poolOf says which pool sb is a member of.
func poolOf(sb *store.Sandbox) (string, bool) {
	return strings.CutPrefix(sb.Owner, store.PoolOwnerPrefix)
}

// StartPools loads the stored pools and starts the refill loop; call it after Recover.
// Close stops it.
func (m *Manager) StartPools(ctx context.Context) error {
	list, err := m.store.ListPools(ctx)
	if err != nil {
		return err
	}
	m.pools.mu.Lock()
	m.pools.init()
	for _, p := range list {
		m.pools.byName[p.Name] = p
	}
	kick := m.pools.kick
	m.pools.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			more := m.tendPools(m.ctx)
			wait := refillIdle
			if more {
				wait = refillPause
			}
			t := time.NewTimer(wait)
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-kick:
				// A wake-up never shortens the pause between two starts, and a claim's
				// caller has the pause to itself (its first exec comes next).
				t.Stop()
				select {
				case <-m.ctx.Done():
					return
				case <-time.After(refillPause):
				}
			case <-t.C:
			}
		}
	}()
	return nil
}

// tendPools retires members that no longer fit and starts at most one, for the pool
// furthest below its size; it says whether a pool is still short.
func (m *Manager) tendPools(ctx context.Context) (short bool) {
	m.pools.mu.Lock()
	pools := make(map[string]store.Pool, len(m.pools.byName))
	for name, p := range m.pools.byName {
		pools[name] = *p
	}
	busy := m.pools.cold > 0
	full := m.now().Sub(m.pools.scanned) >= orphanScanEvery
	if full {
		m.pools.scanned = m.now()
	}
	m.pools.mu.Unlock()
	all, err := m.members(ctx, slices.Collect(maps.Keys(pools)), full)
	if err != nil {
		m.log.Warn("pools: list members", "err", err)
		return false
	}
	count := map[string]int{}
	for _, sb := range all {
		name, _ := poolOf(sb)
		p, exists := pools[name]
		why := m.misfit(sb, p, exists, count[name])
		if why == "" {
			count[name]++
			continue
		}
		if err := m.retireMember(ctx, sb.ID, why); err != nil {
			m.log.Warn("pools: retire a member", "sandbox", sb.ID, "pool", name, "why", why, "err", err)
		}
	}
	var next *store.Pool
	for _, p := range pools {
		if count[p.Name] < p.Size && (next == nil || p.Size-count[p.Name] > next.Size-count[next.Name]) {
			next = &p
		}
	}
	if next == nil {
		return false
	}
	if busy || m.roomToStart() != nil || m.placeHere() != nil {
		return true
	}
	start := time.Now()
	if err := m.startMember(ctx, next); err != nil {
		m.log.Warn("pools: start a member", "pool", next.Name, "err", err)
		return false // look again after refillIdle, not at once
	}
	took := time.Since(start)
	m.pools.mu.Lock()
	s := m.pools.stat(next.Name)
	s.refills++
	s.refillLast, s.refillSum = took, s.refillSum+took
	m.pools.mu.Unlock()
	return count[next.Name]+1 < next.Size
}

// orphanScanEvery is how often the refill loop looks through every live sandbox for
// members of pools that are gone (removing a pool retires its members at once; this
// finds those a restart or a crash left).
const orphanScanEvery = time.Minute

// members lists the live members of the pools named, or with full, of any pool.
func (m *Manager) members(ctx context.Context, names []string, full bool) ([]*store.Sandbox, error) {
	if full {
		all, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: liveStates}))
		return slices.DeleteFunc(all, func(sb *store.Sandbox) bool { _, ok := poolOf(sb); return !ok }), err
	}
	var out []*store.Sandbox
	for _, name := range names {
		list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{Owner: store.PoolOwner(name), States: liveStates}))
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}

// misfit says why a member must go ("": it stays); have is how many of its pool's
// members were kept before it.
func (m *Manager) misfit(sb *store.Sandbox, p store.Pool, exists bool, have int) string {
	switch {
	case !exists:
		return "pool_removed"
	case sb.State == Creating:
		return "" // its start is under way (recovery rolls back one a crash cut)
	case sb.State != Running:
		return "not_running"
	case sb.ImageDigest != p.ImageDigest || sb.Limits != p.Limits || sb.Runtime != p.Runtime || sb.Network.Mode != p.NetworkMode:
		return "pool_changed"
	case m.now().Sub(sb.CreatedAt) > memberMaxAge:
		return "too_old"
	case !m.untouched(sb):
		return "used"
	case have >= p.Size:
		return "pool_shrunk"
	}
	return ""
}

// untouched says no call ever reached sb's agent: no activity since it was made, and
// none in progress.
func (m *Manager) untouched(sb *store.Sandbox) bool {
	m.mu.Lock()
	_, touched := m.activity[sb.ID]
	working := m.working[sb.ID] > 0
	m.mu.Unlock()
	return !touched && !working && sb.LastActivity.Equal(sb.CreatedAt) && sb.Generation == 1
}

// startMember makes one member of p and starts it.
func (m *Manager) startMember(ctx context.Context, p *store.Pool) error {
	img, err := m.images.ByDigest(p.ImageDigest)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	now := m.now()
	id := newID("sb_")
	sb := &store.Sandbox{
		ID: id, Name: "pool-" + strings.TrimPrefix(id, "sb_"), Owner: store.PoolOwner(p.Name), State: Creating,
		Image: img.Name, ImageDigest: img.Digest, Limits: p.Limits, CreatedAt: now, UpdatedAt: now, LastActivity: now,
		ExpiresAt: now.Add(m.cfg.DefaultMaxLifetime + memberMaxAge), TTL: time.Minute,
		Network: store.Network{Mode: p.NetworkMode}, Runtime: p.Runtime,
	}
	admitted, err := m.admit(ctx, id, p.Limits.Memory)
	if err != nil {
		return err
	}
	defer admitted()
	if err := m.insertSandbox(ctx, sb, func() {}); err != nil {
		return err
	}
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	sb.Generation = 1
	if err := m.startContainer(ctx, sb, img); err != nil {
		m.rollbackCreate(sb)
		return err
	}
	if err := m.setState(ctx, sb, Running, "pool"); err != nil {
		m.rollbackCreate(sb)
		return err
	}
	return nil
}

// orphanMembers finds (and unless dryRun, retires) the members of pools that are gone,
// for gc; the refill loop retires them too.
func (m *Manager) orphanMembers(ctx context.Context, dryRun bool) []Leftover {
	all, err := m.members(ctx, nil, true)
	if err != nil {
		m.log.Warn("gc: list pool members", "err", err)
		return nil
	}
	m.pools.mu.Lock()
	m.pools.init()
	pools := maps.Clone(m.pools.byName)
	m.pools.mu.Unlock()
	var out []Leftover
	for _, sb := range all {
		if name, _ := poolOf(sb); pools[name] == nil {
			out = append(out, Leftover{SandboxID: sb.ID, Reason: "a member of pool " + name + ", which is gone"})
			if !dryRun {
				if err := m.retireMember(ctx, sb.ID, "pool_removed"); err != nil {
					m.log.Warn("gc: retire a member", "sandbox", sb.ID, "err", err)
				}
			}
		}
	}
	return out
}

// retireMember terminates a member that is still one and removes its record: nobody
// will ask for its tombstone.
func (m *Manager) retireMember(ctx context.Context, id, why string) error {
	unlock := m.locks.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := poolOf(sb); !ok {
		return nil // claimed meanwhile
	}
	if sb.State == Creating {
		m.rollbackCreate(sb)
		return nil
	}
	// The cleanup terminate starts frees the member's container, network and uid
	// range, then its record (cleanupLocked): deleting the record here would leave the
	// cleanup nothing to find.
	return m.terminate(ctx, sb, why)
}
