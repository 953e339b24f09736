package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// CreateRequest is what a create asks for.
type CreateRequest struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	// Pull says when the image is fetched from its registry first (PullMissing, the
	// default, PullAlways or PullNever); see createImage.
	Pull   string            `json:"pull,omitempty"`
	Limits store.Limits      `json:"limits"`
	Env    map[string]string `json:"env"`
	Labels map[string]string `json:"labels"`
	// NodeSelector are the labels the sandbox's node must carry (placement.go).
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	MaxLifetime  string            `json:"max_lifetime"`
	IdleSuspend  string            `json:"idle_suspend"`
	TTL          string            `json:"ttl"`
	Network      *store.Network    `json:"network"`
	// Runtime names the runtime to run the sandbox; "" is the node's default.
	Runtime string `json:"runtime,omitempty"`
	// Role is the one role the sandbox acts with (the caller has checked that its
	// owner holds it); "" is the owner's roles.
	Role string `json:"role,omitempty"`
	// Workspace, if set, mounts a host directory at /workspace (workspace.go).
	Workspace *WorkspaceRequest `json:"workspace,omitempty"`
	// Volumes are the owner's volumes to attach (volumes.go).
	Volumes []VolumeMountRequest `json:"volumes,omitempty"`
	// MayPull says the caller holds the permission to pull images (the edge checked
	// it); a create that would have to pull without it is refused.
	MayPull bool `json:"-"`
	// Progress, if not nil, sees each step of the image's pull, from one goroutine at
	// a time.
	Progress func(PullEvent) `json:"-"`
}

// opTimeout bounds the host work of one operation, whoever waits for it.
const opTimeout = 2 * time.Minute

// pullTimeout bounds the pull a create makes first (the registry's own timeouts bound
// each of its requests).
const pullTimeout = time.Hour

// Create makes a sandbox and starts it. Bad input is refused before anything is
// recorded; a create that fails half way removes everything it made.
func (m *Manager) Create(ctx context.Context, call Call, req CreateRequest) (*store.Operation, *store.Sandbox, error) {
	if req.Image == "" {
		req.Image = image.HostName
	}
	if err := ValidateName(req.Name); err != nil {
		return nil, nil, err
	}
	if err := CheckEnv(sortedEnv(req.Env)); err != nil {
		return nil, nil, err
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, nil, err
	}
	if err := checkPull(req.Pull); err != nil {
		return nil, nil, err
	}
	if err := m.checkRuntime(req.Runtime); err != nil {
		return nil, nil, err
	}
	if err := m.selects(req.NodeSelector); err != nil {
		return nil, nil, err
	}
	if req.Runtime == "" {
		req.Runtime = m.defaultRuntime
	}
	limits, err := m.resolveLimits(req.Limits)
	if err != nil {
		return nil, nil, err
	}
	lifetime, err := m.resolveLifetime(req.MaxLifetime)
	if err != nil {
		return nil, nil, err
	}
	idle, err := resolveDuration("idle_suspend", req.IdleSuspend, m.cfg.DefaultIdleSuspend, m.cfg.MinIdleSuspend, 30*24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	ttl, err := resolveDuration("ttl", req.TTL, m.cfg.DefaultTTL, time.Minute, 365*24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	var ws *store.Workspace
	if req.Workspace != nil {
		if ws, err = m.checkWorkspace(req.Workspace, req.Runtime); err != nil {
			return nil, nil, err
		}
	}
	network := DefaultNetwork
	if req.Network != nil {
		if network, err = normalNetwork(*req.Network); err != nil {
			return nil, nil, err
		}
	}
	if err := m.checkVolumeMounts(&store.Sandbox{Name: req.Name, Runtime: req.Runtime}, req.Volumes); err != nil {
		return nil, nil, err
	}
	img, pull, err := m.createImage(call, req)
	if err != nil {
		return nil, nil, err
	}
	if err := m.roomToStart(); err != nil {
		return nil, nil, err
	}
	if err := m.placeHere(); err != nil {
		return nil, nil, err
	}
	// A create with no idempotency key to look up and no pull to follow stores its
	// operation only as it ends, in one write with the record it ends with (a pool's
	// claim, pool_claim.go, or the sandbox running, createdRunning): nobody can ask for
	// it before the answer that names it, and a crash before leaves the record
	// creating, which recovery removes.
	w, one := m.store.(store.ClaimWriter)
	opStored := call.IdempotencyKey != "" || pull || !one
	end, replay, err := m.openOp(ctx, call, opStored, "create", "", req)
	if err != nil {
		return nil, nil, err
	}
	op := end.op
	if replay {
		return m.replayed(ctx, op)
	}
	if pull {
		// Part of the operation: it goes on if the caller goes away, and a pull that
		// fails fails the create before anything of the sandbox exists.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		img, err = m.PullImage(pctx, call, PullRequest{Ref: req.Image, Missing: req.Pull != PullAlways}, req.Progress)
		cancel()
		if err != nil {
			return op, nil, m.finishOp(op, "", err)
		}
	}
	m.images.Touch(img.Digest) // recently used: the last the cache evicts
	// The work goes on if the caller goes away: the operation says how it ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()

	now := m.now()
	sb := &store.Sandbox{
		CreatedBy: creatorOf(ctx),
		ID:        newID("sb_"), Name: req.Name, Owner: call.Owner, State: Creating,
		Image: img.Name, ImageDigest: img.Digest, Limits: limits, Env: req.Env, Labels: req.Labels,
		CreatedAt: now, UpdatedAt: now, LastActivity: now, ExpiresAt: now.Add(lifetime),
		IdleSuspend: idle, TTL: ttl, Network: network, Runtime: req.Runtime, Role: req.Role, Workspace: ws,
		NodeSelector: req.NodeSelector,
	}
	// A pooled member started without volumes: a create that attaches some is cold.
	if claimed, err := m.claimPooled(ctx, call, sb, len(req.Volumes) == 0, end); err != nil { // pool_claim.go
		return op, nil, end.finish(m, "", err)
	} else if claimed {
		return op, sb, end.finish(m, sb.ID, nil)
	}
	defer m.coldCreate()()
	op.SandboxID = sb.ID
	noteSandbox(ctx, sb.ID)
	release, err := m.reserveLive(ctx, call.Owner, sb.ID)
	if err != nil {
		return op, nil, end.finish(m, "", err)
	}
	admitted, err := m.admit(ctx, sb.ID, sb.Limits.Memory)
	if err != nil {
		release()
		return op, nil, end.finish(m, "", err)
	}
	defer admitted()
	// The leases first, and the record with its volumes (no second write); a crash
	// between leaves leases of no sandbox, which recovery drops.
	if sb.Volumes, err = m.leaseVolumes(ctx, sb, req.Volumes); err != nil {
		release()
		return op, nil, end.finish(m, "", err)
	}
	if err := m.insertSandbox(ctx, sb, release); err != nil {
		m.releaseVolumes(ctx, sb)
		return op, nil, end.finish(m, "", err)
	}
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	created := m.newEvent(sb, "created", "create", nil)
	if !one {
		m.storeEvent(created)
	}
	sb.Generation = 1 // the container being built is the first
	if err := m.startContainer(ctx, sb, img); err != nil {
		m.createFailed(sb, created, one)
		return op, nil, end.finish(m, "", unavailable(err, "sandbox %q could not start", req.Name))
	}
	if err := m.createdRunning(ctx, w, sb, created, end); err != nil {
		m.createFailed(sb, created, one)
		return op, nil, end.finish(m, "", err)
	}
	return op, sb, end.finish(m, sb.ID, nil)
}

// createdRunning stores sb, its container started, running: with a ClaimWriter w in one
// write with its created event, the state's event and the create's operation ended
// (end); otherwise the record, then the state's event (the caller ends the operation).
func (m *Manager) createdRunning(ctx context.Context, w store.ClaimWriter, sb *store.Sandbox, created *store.Event, end *endOp) error {
	if w == nil {
		return m.setState(ctx, sb, Running, "create")
	}
	if err := transition(sb.State, Running); err != nil {
		return err
	}
	from := sb.State
	sb.State = Running
	state := m.newEvent(sb, "state", "create", map[string]string{"from": string(from), "to": string(Running)})
	if err := end.write(ctx, m, w, sb, created, state); err != nil {
		sb.State = from
		return err
	}
	return nil
}

// createFailed rolls back a cold create whose container did not start or whose record
// could not say so, its created event stored first if the record's write was to carry
// it (unstored), as a record kept failed shows it.
func (m *Manager) createFailed(sb *store.Sandbox, created *store.Event, unstored bool) {
	if unstored {
		m.storeEvent(created)
	}
	m.rollbackCreate(sb)
}

// createImage finds the image a create runs on, or says it is to be pulled first:
// every time with PullAlways, and with PullMissing when the caller sees no image of
// the name. The host image and digests ("sha256:…") are never pulled.
func (m *Manager) createImage(call Call, req CreateRequest) (img *image.Image, pull bool, err error) {
	img, err = m.images.Get(image.Scope{Owner: call.Owner}, req.Image)
	pullable := req.Image != image.HostName && !strings.HasPrefix(req.Image, "sha256:")
	missing := errors.Is(err, errdefs.ErrNotFound)
	switch {
	case !pullable || !missing && req.Pull != PullAlways:
		return img, false, err
	case req.Pull == PullNever:
		return nil, false, errdefs.NotFound("image %q is not here and pull is never: pull it first (airlock image pull %s), or create with pull missing", req.Image, req.Image)
	case !req.MayPull && missing:
		return nil, false, errdefs.NotFound("image %q is not here, and pulling it from its registry needs the image.create permission, "+
			"which the caller's roles do not grant; ask someone who holds it to pull the image", req.Image)
	case !req.MayPull:
		return nil, false, &errdefs.Error{Class: errdefs.ErrPermissionDenied,
			Msg: fmt.Sprintf("pull always needs the image.create permission, which the caller's roles do not grant; create with pull missing to use image %q as it is here", req.Image)}
	}
	return nil, true, nil
}

// insertSandbox gives sb its uid range and stores its record, then lets go of the
// live-count reservation; a name already taken is an already-exists error.
func (m *Manager) insertSandbox(ctx context.Context, sb *store.Sandbox, release func()) error {
	defer release()
	base, err := m.allocSlot(sb.ID)
	if err != nil {
		return err
	}
	sb.UIDBase, sb.Node = base, m.cfg.NodeName
	if err := m.store.CreateSandbox(ctx, sb); err != nil {
		m.freeSlot(base, sb.ID)
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return errdefs.Exists("a sandbox named %q already exists", sb.Name)
		}
		return err
	}
	return nil
}

// startContainer builds the container behind sb.
func (m *Manager) startContainer(ctx context.Context, sb *store.Sandbox, img *image.Image) error {
	spec := runtime.Spec{
		ID:         sb.ID,
		Image:      img.Digest,
		UIDBase:    sb.UIDBase,
		Limits:     runtime.Limits{CPU: sb.Limits.CPU, Memory: sb.Limits.Memory, PIDs: sb.Limits.PIDs, OpenFiles: sb.Limits.OpenFiles, Disk: sb.Limits.Disk},
		Env:        envList(img.Config.Env, sb.Env),
		WorkingDir: img.Config.WorkingDir,
		Hostname:   sb.Name,
		Deadline:   sb.ExpiresAt,
	}
	files, err := m.deliverSecrets(ctx, sb, false)
	if err != nil {
		return err
	}
	if sb.Workspace != nil {
		mnt, err := m.mountWorkspace(sb)
		if err != nil {
			m.stopSecrets(sb.ID)
			return err
		}
		files = append(files, mnt)
	}
	// The volumes are mounted while the driver builds the root filesystem and the
	// network is made: the driver's hook waits for all three.
	volumes := m.startVolumes(ctx, sb)
	attached, err := m.attach(ctx, sb, &spec, files)
	if err != nil {
		volumes()
		m.stopSecrets(sb.ID)
		m.unmountWorkspace(sb.ID)
		m.unmountVolumes(sb.ID)
		return err
	}
	spec.Network = withVolumes(spec.Network, volumes)
	if err := m.startFromMemory(ctx, sb, spec); err != nil { // memory.go
		attached()
		volumes() // no mount is made after the detach
		m.detach(context.WithoutCancel(ctx), sb.ID)
		if errors.Is(err, errRestoreFailed) {
			return m.startContainer(ctx, sb, img) // afresh: the memory is dropped
		}
		return err
	}
	volumes() // done already, unless the driver never called its hook
	return attached()
}

// rollbackCreate removes every trace of a create that did not finish; when its
// resources cannot be removed yet, it keeps the record, failed, for recovery to retry.
func (m *Manager) rollbackCreate(sb *store.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	m.detach(ctx, sb.ID)
	m.dropMemory(sb) // a fork's memory image (memsnap.go)
	if err := m.driver(sb).Delete(ctx, sb.ID); err != nil {
		m.log.Error("roll back create", "sandbox", sb.ID, "err", err)
		// Keep the record, failed, so recovery retries the delete.
		sb.Failure = "create failed and its resources could not be removed yet"
		if err := m.setState(ctx, sb, Failed, "create_failed"); err != nil {
			m.log.Error("record a create that could not be rolled back", "sandbox", sb.ID, "err", err)
		}
		return
	}
	m.releaseVolumes(ctx, sb)
	if err := m.store.DeleteSandbox(ctx, sb.ID); err != nil {
		m.log.Error("roll back create record", "sandbox", sb.ID, "err", err)
	}
	m.freeSlot(sb.UIDBase, sb.ID)
}

// Terminate ends a sandbox: it returns once every process of it is killed and its
// record is a tombstone (its name free again); its container, upper layer and owned
// resources are removed afterwards, in the background (cleanup.go).
func (m *Manager) Terminate(ctx context.Context, call Call, ref string) (*store.Operation, *store.Sandbox, error) {
	sb, err := m.Resolve(ctx, call.Owner, ref)
	if err != nil {
		return nil, nil, err
	}
	if !m.abandoned(ctx, sb) { // else nothing of it is on this node
		if err := m.onThisNode(sb); err != nil {
			return nil, nil, err
		}
	}
	if call.IfMatch != 0 && call.IfMatch != sb.Version {
		return nil, nil, errdefs.VersionConflict("sandbox %q is at version %d, not %d", sb.Name, sb.Version, call.IfMatch).
			WithDetails(map[string]any{"version": sb.Version})
	}
	// A terminate with no idempotency key to look up stores its operation only with
	// the tombstone, ended, in one write (cleanup.go): nobody can ask for it before the
	// answer that names it.
	_, one := m.store.(store.ClaimWriter)
	end, replay, err := m.openOp(ctx, call, !one || call.IdempotencyKey != "", "terminate", sb.ID, map[string]string{"sandbox": sb.ID})
	if err != nil {
		return nil, nil, err
	}
	op := end.op
	if replay {
		return m.replayed(ctx, op)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	if sb, err = m.store.GetSandbox(ctx, sb.ID); err != nil {
		return op, nil, end.finish(m, "", err)
	}
	switch {
	case m.abandoned(ctx, sb):
		// Its node deletes its container and layer when it comes back (Recover).
		if err = m.setState(ctx, sb, Terminated, "terminate"); err == nil {
			m.dropFiles(ctx, sb)
		}
	case !m.ownRecord(sb): // it moved meanwhile
		err = m.onThisNode(sb)
	default:
		err = m.terminateEnding(ctx, sb, "terminate", end)
	}
	return op, sb, end.finish(m, sb.ID, err)
}

// terminate ends sb and returns once it is a tombstone whose processes are all
// killed: it records the cleanup and sb terminating, then kills, then records the
// tombstone; the rest of its resources go in the background (cleanup.go). The caller
// holds its lock.
func (m *Manager) terminate(ctx context.Context, sb *store.Sandbox, cause string) error {
	return m.terminateEnding(ctx, sb, cause, nil)
}

// terminateEnding is terminate that also ends end, the operation of a terminate asked
// for, in the tombstone's write, if the store can make it one (endOp).
func (m *Manager) terminateEnding(ctx context.Context, sb *store.Sandbox, cause string, end *endOp) error {
	if sb.State == Terminated {
		return nil
	}
	// Recorded before the kill, so whoever the kill breaks off (a process stream)
	// reads the sandbox as ending at once; a crash from here on is finished by the
	// cleanup at the next start.
	op, err := m.recordTerminating(ctx, sb, cause)
	if err != nil {
		return err
	}
	if err := m.tombstone(ctx, sb, cause, end); err != nil {
		return err
	}
	m.releaseVolumes(ctx, sb) // the volumes stay, free for other sandboxes
	m.startCleanup(sb.ID, op)
	return nil
}

// reserveLive holds one of owner's live-sandbox slots for the sandbox id until its
// record exists (then the record counts), so concurrent creates cannot both take the
// last slot. The creates in flight are taken before the records are read, and each is
// counted once: one whose record is already stored is not counted again, even when a
// pool claim re-keyed it to its member's id meanwhile (the ids are read again after
// the records).
func (m *Manager) reserveLive(ctx context.Context, owner, id string) (release func(), err error) {
	m.mu.Lock()
	if m.pending[owner] == nil {
		m.pending[owner] = map[string]*reservation{}
	}
	inFlight := slices.Collect(maps.Values(m.pending[owner]))
	m.pending[owner][id] = &reservation{id: id}
	m.mu.Unlock()
	release = func() { m.releasePending(owner, id) }
	if m.cfg.LiveCap <= 0 {
		return release, nil // no cap: nothing to count
	}
	// Past cap+len(inFlight) records the owner is at the cap whichever they are: no
	// more is read, however many the owner holds.
	// An owner near a cap of thousands has thousands of live records, read at every
	// create: viewed, not copied.
	var ids []string
	err = m.View(ctx, store.SandboxFilter{Owner: owner, States: liveStates, Limit: m.cfg.LiveCap + len(inFlight)},
		func(sb *store.Sandbox) error { ids = append(ids, sb.ID); return nil })
	if err != nil {
		release()
		return nil, err
	}
	counted := make(map[string]bool, len(inFlight)+len(ids))
	m.mu.Lock()
	for _, r := range inFlight {
		counted[r.id] = true
	}
	m.mu.Unlock()
	for _, id := range ids { // the list holds live states only
		counted[id] = true
	}
	if live := len(counted); live >= m.cfg.LiveCap {
		release()
		return nil, errdefs.Quota("owner %q already has %d live sandboxes, the cap is %d; terminate one first", owner, live, m.cfg.LiveCap).
			WithDetails(map[string]any{"cap": m.cfg.LiveCap, "live": live})
	}
	return release, nil
}

// A reservation is a create in flight, under the id of the sandbox it makes (a pool
// claim moves it to the member's id).
type reservation struct{ id string }

// releasePending ends owner's in-flight create id.
func (m *Manager) releasePending(owner, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if delete(m.pending[owner], id); len(m.pending[owner]) == 0 {
		delete(m.pending, owner)
	}
}

// movePending re-keys owner's in-flight create from one sandbox id to another: a claim
// of a pool member stores the member's record, under the member's id, for the owner,
// and the count (in flight plus stored) must see it once, not twice.
func (m *Manager) movePending(owner, from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if in := m.pending[owner]; in != nil && in[from] != nil {
		r := in[from]
		delete(in, from)
		r.id = to
		in[to] = r
	}
}

// liveStates are every state but terminated: the sandboxes that count against the cap.
var liveStates = slices.DeleteFunc(slices.Clone(states), func(s State) bool { return s == Terminated })
