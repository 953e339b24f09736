// Package manager owns the sandbox state machine and every rule about sandboxes: names,
// limits, durable operations and idempotency, uid ranges, activity, and the reconcile
// that makes the store and the host agree after a restart. It talks to a store.Store, a
// runtime.Driver and the image store; it must not know about HTTP or about runc.
//
// Hostile surfaces it guards: every name a caller gives resolves within the caller's own
// scope (another owner's sandbox, snapshot, operation or port is "not found"); an
// agent's errors and over-long or late replies become API errors that say so; activity
// counts only what the owner does (calls, and agent work in progress), never anything
// the sandbox can do on its own or a read of status; a sandbox's DNS and egress records
// go through a per-sandbox rate, queue and coalescing (internal/audit) and its events
// are pruned per sandbox and by age, so no sandbox can fill the database or crowd out
// another's records; events are listed by owner in the store, never filtered after.
package manager

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/volume"
)

// Config holds the manager's rules.
type Config struct {
	// DefaultLimits apply where a create leaves a limit at zero.
	DefaultLimits store.Limits
	// MaxLimits bound what a create may ask for.
	MaxLimits store.Limits
	// HostCPU (cores) and HostMemory (bytes) are the host's size: a create asking for
	// more is refused with these figures. Zero is not checked; the daemon sets them
	// from HostSize.
	HostCPU    float64
	HostMemory int64
	// NodeMemory is how much memory this node's sandboxes may reserve between them
	// (their limits summed; placement.go); zero is HostMemory.
	NodeMemory int64
	// DefaultMaxLifetime and MaxMaxLifetime bound a sandbox's lifetime.
	DefaultMaxLifetime, MaxMaxLifetime time.Duration
	// DefaultIdleSuspend, MinIdleSuspend: how long without inbound traffic before a
	// sandbox suspends on its own, and the smallest value an API caller may ask for
	// (only daemon configuration may lower it, for tests).
	DefaultIdleSuspend, MinIdleSuspend time.Duration
	// MinMaxLifetime is the shortest maximum lifetime a caller may ask for (only daemon
	// configuration may lower it, for tests).
	MinMaxLifetime time.Duration
	// DefaultTTL is how long a suspended sandbox is kept.
	DefaultTTL time.Duration
	// LiveCap is how many live (not terminated) sandboxes one owner may hold.
	LiveCap int
	// UIDBase is the first host uid handed to sandboxes; each gets 65536 ids.
	UIDBase uint32
	// UIDSlots is how many sandbox uid ranges exist: how many sandboxes the node can
	// hold at all (default 16384: host uids 2^20 to 2^20+2^30, clear of 2^31).
	UIDSlots int
	// DefaultRuntime names the driver New is given (default "runc"); a create that names
	// no runtime gets it.
	DefaultRuntime string
	// Audit bounds each sandbox's audit records (rate, queue, coalescing).
	Audit audit.Config
	// EventsPerSandbox is how many of its newest events each sandbox keeps (0: all);
	// EventMaxAge is how long any event is kept (0: forever).
	EventsPerSandbox int
	EventMaxAge      time.Duration
	// InsecureRegistries are the registries ("host" or "host:port") pulled from over
	// plain http and on loopback or private addresses; every other registry is reached
	// over https at public addresses only.
	InsecureRegistries []string
	// RegistryMirrors maps a registry (as pulls name it: "index.docker.io" for Docker
	// Hub) to mirrors tried first, in order; the registry itself is tried last.
	RegistryMirrors map[string][]string
	// ImageCacheMax caps the unpacked bytes of the image store (0: no cap): after a pull,
	// pulled images no sandbox runs on are evicted, least recently used first.
	ImageCacheMax int64
	// Router is the command router's defaults (route.go).
	Router RouterConfig
	// WorkspaceDir holds the mounts of the host workspaces sandboxes see at /workspace,
	// one directory per sandbox ("": no workspaces on this node). The sandboxes' roots
	// must be able to pass through it (mode 0711).
	WorkspaceDir string
	// StateDir is the node's state directory, whose file system holds the sandboxes'
	// disks ("": not watched); no sandbox starts or resumes while that file system has
	// less than MinFreeStateDisk bytes free (statedisk.go).
	StateDir         string
	MinFreeStateDisk int64
	// VolumeQuota is the most bytes of volumes and volume snapshots one owner keeps
	// (0: 1 TiB).
	VolumeQuota int64
	// MaxFileUpload is the most bytes one file uploaded to a sandbox may have, through
	// any plane (0: DefaultMaxFileUpload).
	MaxFileUpload int64
	// MaxTreeEntries and MaxTreeBytes bound one directory tree uploaded as a tar
	// stream: its entries and the stream's bytes (0: DefaultMaxTreeEntries,
	// DefaultMaxTreeBytes).
	MaxTreeEntries, MaxTreeBytes int64
	// NodeName is the node's name, which each of its sandboxes' records carries
	// (nodes.go).
	NodeName string
	// NodeLabels are the node's labels (config node.labels), which a create's node
	// selector matches.
	NodeLabels map[string]string
	// SharedStore says other nodes may share the store: placement then weighs every
	// node of the cluster; on its own the node places on itself.
	SharedStore bool
	// Usage sets the collector of the sandboxes' resource use (usage.go).
	Usage UsageConfig
}

// SetAuditLog makes every exec a record of the hash-chained audit log.
func (m *Manager) SetAuditLog(c *audit.Chain) {
	m.auditLog = c
	m.auditW.SetChain(c) // and every egress decision and DNS answer the sandboxes cause
}

// DefaultConfig is the embedded default.
func DefaultConfig() Config {
	return Config{
		DefaultLimits:      store.Limits{CPU: 1, Memory: 1 << 30, PIDs: 1024, OpenFiles: 65536, Disk: 10 << 30},
		MaxLimits:          store.Limits{CPU: 64, Memory: 256 << 30, PIDs: 1 << 20, OpenFiles: 1 << 20, Disk: 1 << 40},
		DefaultMaxLifetime: 8 * time.Hour,
		MaxMaxLifetime:     30 * 24 * time.Hour,
		DefaultIdleSuspend: 10 * time.Minute,
		MinIdleSuspend:     time.Minute,
		MinMaxLifetime:     time.Minute,
		DefaultTTL:         7 * 24 * time.Hour,
		LiveCap:            100,
		UIDBase:            1 << 20,
		UIDSlots:           16384,
		EventsPerSandbox:   100000,
		EventMaxAge:        30 * 24 * time.Hour,
		MinFreeStateDisk:   128 << 20,
		MaxFileUpload:      DefaultMaxFileUpload,
		MaxTreeEntries:     DefaultMaxTreeEntries,
		MaxTreeBytes:       DefaultMaxTreeBytes,
	}
}

// Manager runs the sandboxes of one node.
type Manager struct {
	auditLog       *audit.Chain      // nil: no audit log
	member         *membership.Lease // nil: a node alone (nodes.go)
	cfg            Config
	store          store.Store
	drivers        map[string]runtime.Driver // by runtime name
	probes         []Probe
	defaultRuntime string
	images         *image.Store
	snaps          *snapshot.Store
	net            netattach.Network
	secrets        *secret.Service  // nil: no secrets
	vols           *volume.Host     // nil: no volumes (volumes.go)
	delivery       *secret.Delivery // nil: secrets are not delivered

	closePort PortCloser
	log       *slog.Logger
	now       func() time.Time

	locks keyedMutex
	pulls keyedMutex // by owner and image name: pulls that wait for each other

	mu       sync.Mutex
	slots    map[uint32]string                  // uid base -> sandbox id
	activity map[string]time.Time               // sandbox id -> last inbound traffic not yet stored
	working  map[string]int                     // sandbox id -> agent calls in progress
	pending  map[string]map[string]*reservation // owner -> sandbox id -> a create between the cap check and its record
	admitted map[string]int64                   // sandbox id -> memory held on this node while its container is made (placement.go)
	retries  map[string]retry                   // sandbox id -> backoff of a failed delete or cleanup
	cleaning map[string]bool                    // sandbox id -> its cleanup runs (cleanup.go)
	watches  map[string]int                     // sandbox id -> watches open (watches.go)

	cleanDone chan struct{} // closed and replaced (under mu) whenever a cleanup run ends
	cleanSem  chan struct{} // one token per running cleanup

	pools poolSet // warm pools (pool.go)

	usage   *usageBook   // the sandboxes' latest readings and history (usage.go)
	metrics *metrics.Set // nil: not counted (metrics.go)

	auditW       *audit.Writer
	lastAgePrune time.Time // touched only by the sweep loop

	evMu sync.Mutex
	evCh chan struct{} // closed and replaced whenever an event is stored

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// runtimeWorks' answer, kept for runtimeCheckTTL.
	rtMu      sync.Mutex
	rtChecked time.Time
	rtOK      bool
	rtWhy     string
}

// New builds a manager. Call Recover before serving, and Close when done.
func New(cfg Config, st store.Store, drv runtime.Driver, images *image.Store, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	if cfg.MaxFileUpload <= 0 {
		cfg.MaxFileUpload = DefaultMaxFileUpload
	}
	if cfg.MaxTreeEntries <= 0 {
		cfg.MaxTreeEntries = DefaultMaxTreeEntries
	}
	if cfg.MaxTreeBytes <= 0 {
		cfg.MaxTreeBytes = DefaultMaxTreeBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, store: st, drivers: map[string]runtime.Driver{cfg.runtimeName(): drv}, defaultRuntime: cfg.runtimeName(), images: images, log: log.With("component", "manager"),
		now: time.Now, slots: map[uint32]string{}, activity: map[string]time.Time{}, working: map[string]int{}, pending: map[string]map[string]*reservation{}, admitted: map[string]int64{}, retries: map[string]retry{},
		cleaning: map[string]bool{}, watches: map[string]int{}, cleanDone: make(chan struct{}), cleanSem: make(chan struct{}, cleanupWorkers),
		ctx: ctx, cancel: cancel, evCh: make(chan struct{}), usage: newUsageBook(cfg.Usage),
	}
	m.auditW = audit.New(cfg.Audit, st, audit.Options{Stored: m.notifyEvents, Logger: log})
	return m
}

// SetClock replaces the manager's clock (tests).
func (m *Manager) SetClock(now func() time.Time) { m.now = now }

// Start launches the background loop: activity flush, the timers and event pruning.
func (m *Manager) Start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				m.flushActivity(context.Background())
				return
			case <-t.C:
				m.flushActivity(m.ctx)
				m.sweep(m.ctx)
				m.pruneEvents(m.ctx)
			}
		}
	}()
	m.startUsage()
}

// Close stops the background loops, waits for the cleanups of terminated sandboxes
// that were asked for, and stores the audit records still queued. Sandboxes keep
// running.
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	return m.auditW.Close()
}

// Driver returns the driver of the node's default runtime.
func (m *Manager) Driver() runtime.Driver { return m.drivers[m.defaultRuntime] }

// AddRuntime makes another runtime driver available to creates that name it. Call it
// before Recover.
func (m *Manager) AddRuntime(name string, d runtime.Driver) { m.drivers[name] = d }

// Runtimes names the node's runtimes, the default first.
func (m *Manager) Runtimes() []string {
	out := []string{m.defaultRuntime}
	for _, name := range slices.Sorted(maps.Keys(m.drivers)) {
		if name != m.defaultRuntime {
			out = append(out, name)
		}
	}
	return out
}

// driver is the driver that runs sb: the one its record names, else the default. A
// record naming a runtime this node lacks gets a driver that refuses everything, so
// its sandbox is never handed to another runtime.
func (m *Manager) driver(sb *store.Sandbox) runtime.Driver {
	name := sb.Runtime
	if name == "" {
		name = m.defaultRuntime
	}
	if d, ok := m.drivers[name]; ok {
		return d
	}
	return missingRuntime(name)
}

// eachDriverIDs calls fn with every runtime's driver and the ids it has resources for;
// the first List error is returned, after the other drivers had their turn.
func (m *Manager) eachDriverIDs(ctx context.Context, fn func(drv runtime.Driver, ids []string)) error {
	var listErr error
	m.eachDriver(func(drv runtime.Driver) {
		ids, err := drv.List(ctx)
		if err != nil {
			listErr = cmp.Or(listErr, err)
			return
		}
		fn(drv, ids)
	})
	return listErr
}

// eachDriver calls fn with every runtime's driver, the default first.
func (m *Manager) eachDriver(fn func(runtime.Driver)) {
	for _, name := range m.Runtimes() {
		fn(m.drivers[name])
	}
}

func newID(prefix string) string {
	var b [10]byte
	rand.Read(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Resolve finds the sandbox a reference names: an id ("sb_…") or a name of owner.
func (m *Manager) Resolve(ctx context.Context, owner, ref string) (*store.Sandbox, error) {
	if ref == "" {
		return nil, errdefs.Invalid("a sandbox name or id is required")
	}
	var sb *store.Sandbox
	var err error
	if strings.HasPrefix(ref, "sb_") {
		sb, err = m.store.GetSandbox(ctx, ref)
		if err == nil && sb.Owner != owner {
			err = errdefs.ErrNotFound
		}
	} else {
		sb, err = m.store.GetSandboxByName(ctx, owner, ref)
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	if err != nil {
		return nil, err
	}
	m.overlayActivity(sb)
	noteSandbox(ctx, sb.ID)
	return sb, nil
}

type notedKey struct{}

// NoteSandbox returns ctx with a place where the manager notes the first sandbox a call
// resolves or creates, and a function that reads it ("" if none): what the API's audit
// record of the call is about.
func NoteSandbox(ctx context.Context) (context.Context, func() string) {
	var mu sync.Mutex
	id := ""
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if id == "" {
			id = s
		}
	}
	return context.WithValue(ctx, notedKey{}, note), func() string {
		mu.Lock()
		defer mu.Unlock()
		return id
	}
}

func noteSandbox(ctx context.Context, id string) {
	if note, ok := ctx.Value(notedKey{}).(func(string)); ok {
		note(id)
	}
}

// List returns owner's sandboxes.
func (m *Manager) List(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	if err := checkStates(f.States); err != nil {
		return nil, err
	}
	list, err := m.store.ListSandboxes(ctx, f)
	if err != nil {
		return nil, err
	}
	for _, sb := range list {
		m.overlayActivity(sb)
	}
	return list, nil
}

// View calls fn with each sandbox List would return, in its order. The records may be
// shared with the store: fn must neither change nor keep them. A long list that is only
// encoded (an API page) saves a copy of each record.
func (m *Manager) View(ctx context.Context, f store.SandboxFilter, fn func(*store.Sandbox) error) error {
	if err := checkStates(f.States); err != nil {
		return err
	}
	v, ok := m.store.(store.SandboxViewer)
	if !ok {
		list, err := m.List(ctx, f)
		if err != nil {
			return err
		}
		return store.ViewList(list, fn)
	}
	return v.ViewSandboxes(ctx, f, func(sb *store.Sandbox) error {
		if t, ok := m.newerActivity(sb); ok { // the shared record stays as stored
			c := *sb
			c.LastActivity = t
			sb = &c
		}
		return fn(sb)
	})
}

func checkStates(list []store.State) error {
	for _, s := range list {
		if !validState(s) {
			return errdefs.Invalid("unknown state %q; states are %s", s, joinStates(states))
		}
	}
	return nil
}

// Operation returns one of owner's operations.
func (m *Manager) Operation(ctx context.Context, owner, id string) (*store.Operation, error) {
	op, err := m.store.GetOperation(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && op.Owner != owner) {
		return nil, errdefs.NotFound("operation %q not found", id)
	}
	return op, err
}

// touch records inbound traffic to a sandbox. It is kept in memory and written to the
// store in batches, so a busy sandbox does not cost a write per call.
func (m *Manager) touch(id string) {
	m.mu.Lock()
	m.activity[id] = m.now()
	m.mu.Unlock()
}

// beginWork counts an agent call that is in progress (a running exec, a session's reply,
// an open PTY, a file transfer): a sandbox with one is active, whatever its last inbound
// traffic, and is not idle-suspended. endWork ends the count and starts the idle window
// afresh.
func (m *Manager) beginWork(id string) (endWork func()) {
	m.mu.Lock()
	m.working[id]++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			if m.working[id]--; m.working[id] <= 0 {
				delete(m.working, id)
			}
			m.activity[id] = m.now()
			m.mu.Unlock()
		})
	}
}

// busy reports whether a sandbox has an agent call in progress.
func (m *Manager) busy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.working[id] > 0
}

func (m *Manager) overlayActivity(sb *store.Sandbox) {
	if t, ok := m.newerActivity(sb); ok {
		sb.LastActivity = t
	}
}

// newerActivity is the traffic to sb kept in memory, if later than its record says.
func (m *Manager) newerActivity(sb *store.Sandbox) (time.Time, bool) {
	m.mu.Lock()
	t, ok := m.activity[sb.ID]
	m.mu.Unlock()
	return t, ok && t.After(sb.LastActivity)
}

func (m *Manager) flushActivity(ctx context.Context) {
	m.mu.Lock()
	pending := m.activity
	m.activity = map[string]time.Time{}
	m.mu.Unlock()
	for id, t := range pending {
		unlock := m.locks.lock(id)
		sb, err := m.store.GetSandbox(ctx, id)
		if err == nil && t.After(sb.LastActivity) {
			sb.LastActivity = t
			err = m.store.UpdateSandbox(ctx, sb)
		}
		unlock()
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("store activity", "sandbox", id, "err", err)
		}
	}
}

// allocSlot reserves a free uid range for id.
func (m *Manager) allocSlot(id string) (uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; i < m.cfg.UIDSlots; i++ {
		base := m.cfg.UIDBase + uint32(i)*65536
		if _, used := m.slots[base]; !used {
			m.slots[base] = id
			return base, nil
		}
	}
	return 0, errdefs.Quota("no free uid range left on this node (%d sandboxes)", m.cfg.UIDSlots)
}

// freeSlot gives back the uid range at base, if sandbox id holds it.
func (m *Manager) freeSlot(base uint32, id string) {
	m.mu.Lock()
	if m.slots[base] == id {
		delete(m.slots, base)
	}
	m.mu.Unlock()
}

// keyedMutex serialises work on one sandbox.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// tryLock takes key's lock if nobody holds or waits for it.
func (k *keyedMutex) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m[key] != nil {
		return nil, false
	}
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := &keyedEntry{refs: 1}
	e.mu.Lock() // nobody else has e yet
	k.m[key] = e
	return k.unlocker(key, e), true
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

func (k *keyedMutex) unlocker(key string, e *keyedEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
