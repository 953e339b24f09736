package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
)

// Moving a sandbox between nodes. With an object store, a suspend puts the sandbox's
// upper layer there as a snapshot (content-addressed chunks and a manifest, the
// snapshot format; unchanged chunks are not sent again) labelled suspendLabel, and its
// record names it (Files, at generation FilesGen). A drained node does the same for
// the suspended sandboxes it already has. Another node then resumes the sandbox when
// the call reaches it and the sandbox's node is lost, stopped or drained: it claims
// the record (node := self, generation + 1, a fresh uid range; a version check, so one
// node wins), fetches and verifies the chunks, rebuilds the layer and starts it. A lost
// sandbox moves the same way when its owner resumes it, from the newest copy of its
// layer in the object store, and the answer says since when its changes are lost.

// suspendLabel marks the snapshots that hold suspended sandboxes' files; its value is
// the generation they were taken at.
const suspendLabel = "airlock.suspend"

// Move is what a resume on another node than the record's says about the move.
type Move struct {
	From       string `json:"from_node"`
	Files      string `json:"files"` // the snapshot the layer was rebuilt from
	Generation int64  `json:"generation"`
	// LostSince, for a lost sandbox, is when the copy it resumed from was taken: its
	// changes after that were on From and are lost (Notice says so).
	LostSince time.Time `json:"lost_since,omitzero"`
	Notice    string    `json:"notice,omitempty"`
}

// MoveOf is the move a resume operation made, or nil.
func MoveOf(op *store.Operation) *Move {
	if op == nil || op.Kind != "resume" || len(op.Result) == 0 {
		return nil
	}
	mv := new(Move)
	if json.Unmarshal(op.Result, mv) != nil || mv.From == "" {
		return nil
	}
	return mv
}

// uploadFiles puts a suspended sandbox's upper layer in the object store and records
// it, unless the node has none or the files there are current; the caller holds the
// sandbox's lock. A failure is logged and recorded as an event: the sandbox stays
// suspended and resumes on this node only, until a later upload succeeds.
func (m *Manager) uploadFiles(ctx context.Context, sb *store.Sandbox) {
	if m.snaps == nil || !m.snaps.Shared() || sb.State != Suspended || m.filesCurrent(sb) {
		return
	}
	man, err := m.snapshot(ctx, sb, map[string]string{suspendLabel: strconv.FormatInt(sb.Generation, 10)})
	if err != nil {
		m.log.Warn("upload a suspended sandbox's files", "sandbox", sb.ID, "err", err)
		m.event(sb, "files_not_uploaded", "suspend", map[string]any{"error": errdefs.Message(err)})
		return
	}
	prev := sb.Files
	sb.Files, sb.FilesAt, sb.FilesGen = man.ID, man.Created, sb.Generation
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		m.log.Warn("record a suspended sandbox's files", "sandbox", sb.ID, "err", err)
		return
	}
	m.event(sb, "files_uploaded", "suspend", map[string]any{"snapshot": man.ID, "stored_size": man.StoredSize, "logical_size": man.LogicalSize})
	if prev != "" && prev != man.ID {
		m.dropSnapshot(ctx, sb, prev)
	}
}

// dropFiles deletes the snapshot that holds a terminated sandbox's files in the object
// store, unless a live sandbox was restored or forked from it.
func (m *Manager) dropFiles(ctx context.Context, sb *store.Sandbox) {
	if sb.Files != "" && m.snaps != nil {
		m.dropSnapshot(ctx, sb, sb.Files)
	}
}

func (m *Manager) dropSnapshot(ctx context.Context, sb *store.Sandbox, id string) {
	if err := m.DeleteSnapshot(ctx, sb.Owner, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Info("keep the files of a suspend", "sandbox", sb.ID, "snapshot", id, "err", err)
	}
}

// uploadSuspended uploads the files of this node's suspended sandboxes that have none
// current in the object store: what a drain does for the sandboxes already suspended.
func (m *Manager) uploadSuspended(ctx context.Context) {
	if m.snaps == nil || !m.snaps.Shared() {
		return
	}
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: []State{Suspended}}))
	if err != nil {
		m.log.Warn("list suspended sandboxes to upload", "err", err)
		return
	}
	for _, sb := range list {
		if m.filesCurrent(sb) {
			continue
		}
		m.sweepOne(ctx, sb.ID, Suspended, func(ctx context.Context, sb *store.Sandbox) error {
			m.uploadFiles(ctx, sb)
			return nil
		})
	}
}

// movable says what sb would resume from if it moved to this node ("": it may not
// move, and the caller refuses as for any other node's sandbox), and since when its
// changes are lost (zero: none are).
func (m *Manager) movable(ctx context.Context, sb *store.Sandbox) (files string, lostSince time.Time, err error) {
	if m.ownRecord(sb) || sb.State != Suspended && sb.State != Lost {
		return "", time.Time{}, nil
	}
	if m.snaps == nil || !m.snaps.Shared() {
		if sb.State == Lost {
			return "", time.Time{}, errdefs.Unavailable("sandbox %q was lost with node %q, and this node has no object store to resume it from", sb.Name, sb.Node)
		}
		return "", time.Time{}, nil
	}
	if sb.State == Suspended {
		if !m.filesCurrent(sb) {
			return "", time.Time{}, nil // its files are only on its node
		}
		if _, away := m.nodeAway(ctx, sb); !away {
			return "", time.Time{}, nil // its node is up: the call is that node's
		}
		return sb.Files, time.Time{}, nil
	}
	man, err := m.newestCopy(ctx, sb)
	if err != nil {
		return "", time.Time{}, err
	}
	return man.ID, man.Created, nil
}

// filesCurrent says whether the object store holds sb's layer as it is: uploaded at
// its last suspend, with no container started since.
func (m *Manager) filesCurrent(sb *store.Sandbox) bool {
	return m.snaps != nil && m.snaps.Shared() && sb.Files != "" && sb.FilesGen == sb.Generation
}

// nodeAway says whether sb's node is lost, stopped or drained (or has no record), and
// which: a suspended sandbox of such a node may move.
func (m *Manager) nodeAway(ctx context.Context, sb *store.Sandbox) (store.NodeState, bool) {
	n, err := m.store.GetNode(ctx, sb.Node)
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.NodeLost, true
	}
	if err != nil {
		return "", false
	}
	st := n.StateAt(m.now())
	return st, slices.Contains([]store.NodeState{store.NodeLost, store.NodeStopped, store.NodeDraining}, st)
}

// abandoned says whether sb is another node's that cannot answer for it, so that
// this node terminates it in its stead: lost, or suspended on a node that is lost or
// stopped. That node deletes what it has of it when it comes back (Recover).
func (m *Manager) abandoned(ctx context.Context, sb *store.Sandbox) bool {
	if m.ownRecord(sb) {
		return false
	}
	if sb.State == Lost {
		return true
	}
	st, away := m.nodeAway(ctx, sb)
	return sb.State == Suspended && away && st != store.NodeDraining
}

// newestCopy is the newest snapshot of sb's layer that the object store holds: its
// last suspend's files, or a snapshot taken since.
func (m *Manager) newestCopy(ctx context.Context, sb *store.Sandbox) (*snapshot.Manifest, error) {
	recs, err := m.store.ListSnapshotRecords(ctx, sb.Owner, sb.ID, 0)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b *store.SnapshotRecord) int { return b.CreatedAt.Compare(a.CreatedAt) })
	for _, rec := range recs {
		man, err := m.snaps.Get(rec.ID)
		if err == nil && man.State == snapshot.StateReady && m.agrees(rec, man) == nil {
			return man, nil
		}
	}
	return nil, errdefs.Precondition("sandbox %q was lost with node %q, and the object store holds no copy of its files (it never suspended with one there, and has no snapshot): there is nothing to resume it from; terminate it", sb.Name, sb.Node).
		WithDetails(map[string]any{"reason": "node_lost", "node": sb.Node, "state": string(Lost)})
}

// moveHere resumes sb on this node if it may move here (movable); nil, nil when it may
// not. The caller holds sb's lock.
func (m *Manager) moveHere(ctx context.Context, sb *store.Sandbox, cause string) (*Move, error) {
	files, lostSince, err := m.movable(ctx, sb)
	if err != nil || files == "" {
		return nil, err
	}
	if err := m.acting(); err != nil {
		return nil, err
	}
	if !sb.ExpiresAt.IsZero() && !m.now().Before(sb.ExpiresAt) {
		return nil, errdefs.Precondition("sandbox %q reached its maximum lifetime; terminate it", sb.Name)
	}
	img, err := m.images.ByDigest(sb.ImageDigest)
	if err != nil {
		return nil, errdefs.Precondition("sandbox %q runs image %s, which this node does not have; pull it here first", sb.Name, sb.ImageDigest).WithCause(err)
	}
	stg, err := m.storage(sb)
	if err != nil {
		return nil, err
	}
	if err := m.roomToStart(); err != nil {
		return nil, err
	}
	if err := m.placeHere(); err != nil {
		return nil, err
	}
	admitted, err := m.admit(ctx, sb.ID, sb.Limits.Memory)
	if err != nil {
		return nil, err
	}
	defer admitted()
	mv := &Move{From: sb.Node, Files: files, LostSince: lostSince}
	if err := m.claim(ctx, sb); err != nil {
		return nil, err
	}
	mv.Generation = sb.Generation
	if !lostSince.IsZero() {
		mv.Notice = fmt.Sprintf("changes since %s were on node %s and are lost", stamp(lostSince), mv.From)
	}
	m.event(sb, "moved", cause, mv)
	// Restore fetches the chunks this node lacks, each checked against its digest, and
	// hashes every chunk again as it copies it: a separate Verify would read them twice.
	err = stg.ReplaceLayer(ctx, sb.ID, sb.Limits.Disk, func(upper string) error {
		return m.snaps.Restore(ctx, files, upper, sb.UIDBase)
	})
	if err == nil {
		if err = m.startContainer(ctx, sb, img); err != nil {
			err = unavailable(err, "sandbox %q could not be resumed", sb.Name)
		}
	}
	if err != nil {
		if serr := m.driver(sb).Stop(ctx, sb.ID); serr != nil {
			m.log.Warn("undo a failed move", "sandbox", sb.ID, "err", serr)
		}
		m.detach(ctx, sb.ID)
		// Its files in the object store are still what it resumes from.
		sb.Files, sb.FilesGen = files, sb.Generation
		if serr := m.setState(ctx, sb, Suspended, "resume_failed"); serr != nil {
			m.log.Warn("record a failed move", "sandbox", sb.ID, "err", serr)
		}
		return nil, corruptErr(err)
	}
	sb.LastActivity = m.now()
	return mv, m.setState(ctx, sb, Running, cause)
}

// claim takes sb's record for this node: node := self, a uid range of this node's,
// generation + 1, resuming. The write checks the version read, so of the nodes that
// claim a record at once one wins; the others are refused and change nothing.
func (m *Manager) claim(ctx context.Context, sb *store.Sandbox) error {
	if err := transition(sb.State, Resuming); err != nil {
		return err
	}
	base, err := m.allocSlot(sb.ID)
	if err != nil {
		return err
	}
	prev := *sb
	sb.Node, sb.UIDBase, sb.State, sb.LostAt, sb.Failure = m.cfg.NodeName, base, Resuming, time.Time{}, ""
	sb.Generation++
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		m.freeSlot(base, sb.ID)
		*sb = prev
		if errors.Is(err, errdefs.ErrVersionConflict) {
			return errdefs.VersionConflict("sandbox %q changed while this node took it over (another node may have resumed it); try again", sb.Name)
		}
		return err
	}
	m.event(sb, "state", "claim", map[string]string{"from": string(prev.State), "to": string(Resuming)})
	return nil
}
