// Package store owns the persistence contract of Airlock: the records it keeps
// (sandboxes, operations, idempotency keys, events) and the Store interface that an
// embedded SQLite store (store/sqlite) and a PostgreSQL store (store/postgres) implement. It knows
// nothing about HTTP, runc or the sandbox state machine; it only keeps what it is given.
//
// Hostile surface: events are the records a sandbox can cause in bulk (each DNS query and
// egress decision may become one), so the contract offers batched appends
// (AppendEvents) and retention (PruneEvents); the rates, caps and ages that bound a
// sandbox's rows are decided by the manager and its audit writer, never here.
package store

import (
	"context"
	"encoding/json"
	"time"
)

// Limits are the resource limits of one sandbox. Zero means "no limit of this kind".
type Limits struct {
	CPU       float64 `json:"cpu,omitempty"`        // fractional cores
	Memory    int64   `json:"memory,omitempty"`     // bytes, no swap
	PIDs      int64   `json:"pids,omitempty"`       // processes
	OpenFiles int64   `json:"open_files,omitempty"` // RLIMIT_NOFILE
	Disk      int64   `json:"disk,omitempty"`       // upper-layer bytes
}

// State is a sandbox's lifecycle state. The manager owns its values and the moves
// between them (DESIGN.md §3); the store only keeps it.
type State string

// Terminated is the one state the store knows: a terminated sandbox frees its name
// (the schema's partial unique index says the same).
const Terminated State = "terminated"

// Identity is who a call is: a user or a service account, with its roles.
type Identity struct {
	Name  string   `json:"name"`
	Kind  string   `json:"kind"` // IdentityUser or IdentityService
	Roles []string `json:"roles"`
	// UIDs are the local users who are this identity over the unix socket.
	UIDs      []int     `json:"uids,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// The kinds of identity.
const (
	IdentityUser    = "user"
	IdentityService = "service"
)

// Token is an API token of an identity. Only a hash of the secret is kept; Prefix (its
// first characters) tells tokens apart in listings.
type Token struct {
	ID        string    `json:"id"`
	Identity  string    `json:"identity"`
	Name      string    `json:"name,omitempty"`
	Hash      string    `json:"hash"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// Role is a custom role: a named set of permissions.
type Role struct {
	Name        string    `json:"name"`
	Permissions []string  `json:"permissions"`
	CreatedAt   time.Time `json:"created_at"`
}

// AuditRecord is one entry of the hash-chained audit log. Doc is the record's body (JSON,
// as the audit package writes it); Prev is the hash of the record before it and Hash
// the record's own, which the audit package computes and checks.
type AuditRecord struct {
	Seq      int64
	Time     time.Time
	Identity string
	Action   string
	Sandbox  string
	Doc      []byte
	Prev     string
	Hash     string
}

// AuditFilter selects audit records, in Seq order, after the Seq After.
type AuditFilter struct {
	Identity, Action, Sandbox string
	Since                     time.Time
	After                     int64
	Limit                     int // 0: 1000
}

// AuditAnchor is where the kept audit log starts: the last pruned record's seq and hash.
type AuditAnchor struct {
	Seq  int64
	Hash string
}

// AuditSeal sets recs' Seq, Prev and Hash so that they follow head: the log's newest
// record, or its anchor when it has none (zero for a log never written).
type AuditSeal func(head AuditAnchor, recs []*AuditRecord)

// Secret is an owner's named secret: its metadata and every version's value, sealed
// (the secret package seals and opens them; the store never sees a plaintext).
type Secret struct {
	Owner        string          `json:"owner"`
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Description  string          `json:"description,omitempty"`
	AllowedHosts []string        `json:"allowed_hosts"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    time.Time       `json:"expires_at,omitzero"`
	RevokedAt    time.Time       `json:"revoked_at,omitzero"`
	Versions     []SecretVersion `json:"versions"`
	Bindings     []SecretBinding `json:"bindings,omitempty"`
	// Rev counts updates; an update whose Rev is not the stored one is a conflict.
	Rev int64 `json:"rev"`
}

// SecretBinding hands a secret to one of its owner's sandboxes.
type SecretBinding struct {
	ID       string   `json:"id"`
	Sandbox  string   `json:"sandbox"`  // the sandbox's id
	Scope    string   `json:"scope"`    // "sandbox" or "execution"
	Target   string   `json:"target"`   // a variable name or an absolute file path
	Delivery string   `json:"delivery"` // "proxy", "file" or "env"
	Hosts    []string `json:"hosts"`    // where a proxy delivery is substituted
	Query    bool     `json:"query,omitempty"`
	// Headers are the request headers a proxy delivery is substituted in; none means
	// Authorization.
	Headers []string `json:"headers,omitempty"`
	// CreatedAt is when the binding was made.
	CreatedAt time.Time `json:"created_at"`
}

// SecretVersion is one value of a secret, sealed under the key KeyID names.
type SecretVersion struct {
	Version     int       `json:"version"`
	CreatedAt   time.Time `json:"created_at"`
	KeyID       string    `json:"key_id"`
	Sealed      []byte    `json:"sealed"` // nonce and AES-256-GCM ciphertext
	Preview     string    `json:"preview"`
	Fingerprint string    `json:"fingerprint"`
	Size        int       `json:"size"`
}

// Sandbox is the durable record of one sandbox handle.
type Sandbox struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	State       State  `json:"state"`
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	// Node names the node the sandbox lives on (its upper layer, its container).
	Node string `json:"node,omitempty"`
	// Runtime names the driver that runs the sandbox; "" is the node's default.
	Runtime string `json:"runtime,omitempty"`
	// Role is the one role the sandbox acts with, narrower than its owner's ("": the
	// owner's roles at the time of each call). It stays when the owner's roles change.
	Role   string            `json:"role,omitempty"`
	Limits Limits            `json:"limits"`
	Env    map[string]string `json:"env,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// NodeSelector are the labels the sandbox's node must carry: its create asked for
	// them, and a node it moves to must carry them too.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Generation   int64             `json:"generation"`
	// Version is the optimistic-concurrency version (the ETag); UpdateSandbox bumps it.
	Version int64 `json:"version"`
	// UIDBase is the first host uid of the sandbox's own user-namespace range.
	UIDBase      uint32        `json:"uid_base"`
	CreatedAt    time.Time     `json:"created_at"`
	UpdatedAt    time.Time     `json:"updated_at"`
	LastActivity time.Time     `json:"last_activity"`
	ExpiresAt    time.Time     `json:"expires_at"` // maximum-lifetime deadline
	IdleSuspend  time.Duration `json:"idle_suspend"`
	TTL          time.Duration `json:"ttl"`
	SuspendedAt  time.Time     `json:"suspended_at,omitempty"` // when it last became suspended
	// Parent is the snapshot this sandbox's upper layer was restored or forked from.
	Parent string `json:"parent,omitempty"`
	// ForkedFrom is the sandbox this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// CreatedBy is the sandbox whose code created this one with its session credential;
	// that code reaches only its own sandbox and the ones it created.
	CreatedBy string `json:"created_by,omitempty"`
	// Network is the sandbox's egress policy.
	Network Network `json:"network"`
	// Workspace, if set, is the host directory the sandbox sees at /workspace.
	Workspace *Workspace `json:"workspace,omitempty"`
	// Volumes are the volumes attached to the sandbox, mounted at each start.
	Volumes []SandboxVolume `json:"volumes,omitempty"`
	// Ports are the sandbox\'s exposed ports.
	Ports   []Port `json:"ports,omitempty"`
	Failure string `json:"failure,omitempty"` // why it is failed, or lost
	// LostAt is when the sandbox was marked lost, its node's lease having lapsed; Node
	// still names that node.
	LostAt time.Time `json:"lost_at,omitzero"`
	// Files is the snapshot that holds the sandbox's upper layer in the object store,
	// taken when it last suspended (FilesAt) at generation FilesGen: while Generation is
	// still FilesGen, nothing has changed the layer since, and another node may resume
	// the sandbox from it.
	Files    string          `json:"files,omitempty"`
	FilesAt  time.Time       `json:"files_at,omitzero"`
	FilesGen int64           `json:"files_gen,omitempty"`
	Extra    json.RawMessage `json:"extra,omitempty"` // room for later features
}

// Workspace is a host directory mounted into a sandbox, through a mapping that shows
// its owner (UID, GID: who owned it when the sandbox was made) as the sandbox's root.
type Workspace struct {
	Path     string `json:"path"` // absolute, symlinks resolved
	ReadOnly bool   `json:"read_only,omitempty"`
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
}

// Network is an egress policy as stored: a mode, allow rules in their text form
// ("HOST[:PORT][/METHODS]") and explicitly authorised private prefixes.
type Network struct {
	Mode         string   `json:"mode"`
	Allow        []string `json:"allow,omitempty"`
	AllowPrivate []string `json:"allow_private,omitempty"`
}

// Port is an exposed port: reachable through the daemon's listener, with a token
// unless public.
type Port struct {
	Port   int    `json:"port"`
	Public bool   `json:"public"`
	Token  string `json:"token"`
}

// Operation states.
const (
	OpPending   = "pending"
	OpRunning   = "running"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
)

// Operation is the durable record of one mutating request. Its error code and message,
// like an event's type and cause, are kept as valid UTF-8: a NUL, or a run of invalid
// bytes, in them reads back as U+FFFD (they may carry text from outside the daemon, and
// no store may refuse the record for it).
type Operation struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"` // create, terminate, suspend, ...
	Owner          string          `json:"owner"`
	SandboxID      string          `json:"sandbox_id,omitempty"`
	State          string          `json:"state"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	RequestHash    string          `json:"request_hash,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	ErrorCode      string          `json:"error_code,omitempty"`
	ErrorMessage   string          `json:"error_message,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// Event is one state change or limit hit of a sandbox.
type Event struct {
	Seq        int64           `json:"seq"` // assigned by the store, strictly increasing
	SandboxID  string          `json:"sandbox_id"`
	Generation int64           `json:"generation"`
	Type       string          `json:"type"`
	Cause      string          `json:"cause,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	Time       time.Time       `json:"time"`
}

// Pool is a warm pool: a target count of ready sandboxes of one image, runtime, limits
// and network mode, kept started so that a create that matches them claims one instead
// of building a container. Its members are sandboxes whose owner is PoolOwner(Name).
type Pool struct {
	Name        string    `json:"name"`
	Image       string    `json:"image"`        // as it was named
	ImageDigest string    `json:"image_digest"` // what members run
	Runtime     string    `json:"runtime"`
	Limits      Limits    `json:"limits"`
	NetworkMode string    `json:"network_mode"`
	Size        int       `json:"size"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// PoolOwnerPrefix starts the owner of every pool member; no identity's name can
// hold its "@" (auth validates names).
const PoolOwnerPrefix = "@pool:"

// PoolOwner is the owner of pool name's members.
func PoolOwner(name string) string { return PoolOwnerPrefix + name }

// SandboxFilter selects sandboxes for ListSandboxes. Empty fields match everything.
type SandboxFilter struct {
	Owner  string
	States []State
	Labels map[string]string // every pair must match
	// Node keeps the sandboxes of this node, and those from before nodes were named
	// (node ""): the ones a node's own loops act on.
	Node string
	// After keeps only the sandboxes that come after this place in list order: where
	// the previous page ended. A place stays valid while sandboxes are created and
	// deleted, the one it names included.
	After *ListPlace
	// Limit caps how many are returned; 0 means no cap.
	Limit int
	// Desc lists newest first: the order turned around, After included.
	Desc bool
}

// OperationFilter selects operations for ListOperations.
type OperationFilter struct {
	States []string // any of these; every state when empty
	Kind   string   // only this kind, when set
	// Node keeps the operations of this node: those whose sandbox's record names this
	// node or none, whose sandbox has no record, or that have no sandbox. Empty: all.
	Node string
	// AfterID keeps only the operations whose id comes after it: where the previous
	// page ended.
	AfterID string
	Limit   int // at most this many; 0 (or more than MaxOperationPage): MaxOperationPage
}

// MaxOperationPage is the most operations one ListOperations returns.
const MaxOperationPage = 1000

// PageLimit is f's limit as the stores apply it.
func (f OperationFilter) PageLimit() int {
	if f.Limit <= 0 || f.Limit > MaxOperationPage {
		return MaxOperationPage
	}
	return f.Limit
}

// ListPlace is a place in ListSandboxes's order: by CreatedAt, then by ID.
type ListPlace struct {
	CreatedAt time.Time
	ID        string
}

// PlaceOf is the place of sb in ListSandboxes's order.
func PlaceOf(sb *Sandbox) *ListPlace { return &ListPlace{CreatedAt: sb.CreatedAt, ID: sb.ID} }

// EventFilter selects events for ListEvents.
type EventFilter struct {
	SandboxID string
	// Owner keeps only the events of sandboxes this owner holds a record of; a sandbox
	// deleted for good takes its events out of every owner's view.
	Owner    string
	AfterSeq int64
	Limit    int // 0 means a default of 1000
}

// PruneBatch is how many sandboxes one statement of PruneEvents's count pass covers.
const PruneBatch = 100

// EventRetention says which events PruneEvents removes. Zero fields remove nothing.
type EventRetention struct {
	// MaxPerSandbox keeps at most this many of each sandbox's newest events (by Seq).
	MaxPerSandbox int
	// Sandboxes limits the MaxPerSandbox pass to these sandboxes; nil means every one.
	Sandboxes []string
	// Before removes the events stored before this time. Events are appended in time
	// order, so the oldest are removed first; an event whose Time is out of order with
	// its Seq may outlive the cutoff until a later prune.
	Before time.Time
}

// SandboxViewer is a Store that can show a list without copying each record for the
// caller: fn sees the records ListSandboxes would return, in its order, shared with
// the store, so fn must neither change nor keep them. A long list (an API page) that
// only reads them saves a deep copy of each. Stores without it are listed through
// ListSandboxes.
type SandboxViewer interface {
	ViewSandboxes(ctx context.Context, f SandboxFilter, fn func(*Sandbox) error) error
}

// ClaimWriter is a Store that writes a sandbox's record, an operation and events in one
// transaction: the record (a compare-and-swap on its version, as UpdateSandbox), the
// operation (inserted as CreateOperation does when Claim.NewOp, otherwise overwritten)
// and the events. Either all of it is stored or none of it. A create served from a warm
// pool writes its claim of the member so, and a terminate each of its two steps (the
// sandbox terminating with its cleanup operation; the tombstone with the terminate's
// operation ended). Stores without it write them one after another.
type ClaimWriter interface {
	WriteClaim(ctx context.Context, c Claim) error
}

// Claim is what one ClaimWriter write stores.
type Claim struct {
	Sandbox *Sandbox // the record as the write makes it, at the version read
	Op      *Operation
	NewOp   bool // Op is not stored yet
	Events  []*Event
}

// ViewList passes each of list to fn in order, as ViewSandboxes does, up to fn's
// first error.
func ViewList(list []*Sandbox, fn func(*Sandbox) error) error {
	for _, sb := range list {
		if err := fn(sb); err != nil {
			return err
		}
	}
	return nil
}

// Store keeps Airlock's records. Every method is safe for concurrent use. Errors wrap
// the errdefs classes: ErrNotFound, ErrAlreadyExists, ErrVersionConflict.
type Store interface {
	// CreateSandbox inserts sb. A live (non-terminated) sandbox with the same owner and
	// name is ErrAlreadyExists. Version is set to 1.
	CreateSandbox(ctx context.Context, sb *Sandbox) error
	// GetSandbox returns the sandbox with this id, or ErrNotFound.
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	// GetSandboxByName returns the live sandbox of owner with this name; when none is
	// live, the most recent terminated one; otherwise ErrNotFound.
	GetSandboxByName(ctx context.Context, owner, name string) (*Sandbox, error)
	// ListSandboxes returns matching sandboxes ordered by creation time, then by id
	// (or the other way round, f.Desc), after f.After and at most f.Limit of them.
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*Sandbox, error)
	// UpdateSandbox writes sb if the stored version equals sb.Version, then bumps
	// sb.Version by one; otherwise ErrVersionConflict (ErrNotFound if it is gone).
	UpdateSandbox(ctx context.Context, sb *Sandbox) error
	// ReservedByNode sums what the sandboxes in states, but for those whose ids are in
	// except, reserve on each node, in one query: their memory and CPU limits, and how
	// many they are, by the node their records name ("" for records from before nodes
	// were named). A node with none is absent. With nodes, only those nodes' records
	// are read (a node counting its own; nil: every node).
	ReservedByNode(ctx context.Context, states []State, except, nodes []string) (map[string]Resources, error)
	// DeleteSandbox removes the record for good.
	DeleteSandbox(ctx context.Context, id string) error

	// CreateOperation inserts op. When op.IdempotencyKey is set and (owner, key) was
	// seen before, it returns the existing operation and ErrAlreadyExists instead.
	CreateOperation(ctx context.Context, op *Operation) (*Operation, error)
	// UpdateOperation overwrites op (by id).
	UpdateOperation(ctx context.Context, op *Operation) error
	// GetOperation returns the operation with this id, or ErrNotFound.
	GetOperation(ctx context.Context, id string) (*Operation, error)
	// ListOperations returns the operations f selects, in id order, at most f.Limit
	// (MaxOperationPage when 0 or more).
	ListOperations(ctx context.Context, f OperationFilter) ([]*Operation, error)

	// AppendEvent stores ev and sets ev.Seq.
	// CreateIdentity stores a new identity; ErrAlreadyExists if the name is taken.
	CreateIdentity(ctx context.Context, id *Identity) error
	// UpdateIdentity replaces an identity's record; ErrNotFound if there is none.
	UpdateIdentity(ctx context.Context, id *Identity) error
	GetIdentity(ctx context.Context, name string) (*Identity, error)
	ListIdentities(ctx context.Context) ([]*Identity, error)
	// DeleteIdentity removes an identity and every token of it.
	DeleteIdentity(ctx context.Context, name string) error

	// CreateToken stores a token; ErrAlreadyExists if its id or hash is taken.
	CreateToken(ctx context.Context, t *Token) error
	GetTokenByHash(ctx context.Context, hash string) (*Token, error)
	// ListTokens lists an identity's tokens ("" lists every token).
	ListTokens(ctx context.Context, identity string) ([]*Token, error)
	// UpdateToken replaces a token's record (revocation); ErrNotFound if there is none.
	UpdateToken(ctx context.Context, t *Token) error

	// PutRole creates or replaces a custom role.
	PutRole(ctx context.Context, r *Role) error
	ListRoles(ctx context.Context) ([]*Role, error)
	DeleteRole(ctx context.Context, name string) error

	// CreateSecret stores a new secret; ErrAlreadyExists if the owner has one of its name.
	CreateSecret(ctx context.Context, s *Secret) error
	// UpdateSecret replaces a secret whose stored Rev is s.Rev, and increments s.Rev;
	// ErrVersionConflict when another update came first.
	UpdateSecret(ctx context.Context, s *Secret) error
	GetSecret(ctx context.Context, owner, name string) (*Secret, error)
	// ListSecrets lists an owner's secrets ("" lists every owner's).
	ListSecrets(ctx context.Context, owner string) ([]*Secret, error)
	// DeleteSecret removes an owner's secret and every version of it; ErrNotFound if
	// there is none.
	DeleteSecret(ctx context.Context, owner, name string) error

	// AppendAudit appends recs in one transaction. With seal, the store reads the log's
	// head inside that transaction, holding off every other writer of the log (another
	// node's too) until it commits, and seal numbers and hashes recs to follow it; with
	// nil, the caller set Seq, Prev and Hash. A Seq already taken is an error.
	AppendAudit(ctx context.Context, recs []*AuditRecord, seal AuditSeal) error
	// LastAudit returns the newest audit record, or nil for an empty log.
	LastAudit(ctx context.Context) (*AuditRecord, error)
	// ListAudit returns matching audit records in Seq order.
	ListAudit(ctx context.Context, f AuditFilter) ([]*AuditRecord, error)
	// PruneAudit removes the records before seq and records the last of them as the
	// anchor, in one transaction.
	PruneAudit(ctx context.Context, before int64) error
	// AuditAnchor returns where the kept log starts (zero for a log never pruned).
	AuditAnchor(ctx context.Context) (AuditAnchor, error)

	// PutPool creates or replaces the pool of p.Name.
	PutPool(ctx context.Context, p *Pool) error
	// ListPools returns every pool, by name.
	ListPools(ctx context.Context) ([]*Pool, error)
	// DeletePool removes a pool's record (not its members); ErrNotFound if there is none.
	DeletePool(ctx context.Context, name string) error

	AppendEvent(ctx context.Context, ev *Event) error
	// AppendEvents stores evs in one transaction, all or none, in their order, and sets
	// each Seq. It is how a flood of records costs one write instead of one per record.
	AppendEvents(ctx context.Context, evs []*Event) error
	// ListEvents returns matching events in Seq order.
	ListEvents(ctx context.Context, f EventFilter) ([]*Event, error)
	// PruneEvents removes what r says is past retention and returns how many events it
	// removed.
	PruneEvents(ctx context.Context, r EventRetention) (int64, error)

	Nodes       // nodes.go
	ClusterKeys // keys.go
	ClusterCA   // clusterca.go
	Snapshots   // snapshots.go
	Volumes     // volumes.go

	Close() error
}
