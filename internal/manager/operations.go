package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Call carries what every mutating request brings besides its body.
type Call struct {
	Owner string
	// Admin says the caller holds the admin permission (it publishes public images).
	Admin          bool
	IdempotencyKey string
	// IfMatch is the sandbox version the caller expects (0: no expectation).
	IfMatch int64
}

func requestHash(kind string, body any) string {
	b, _ := json.Marshal(body) // maps marshal in key order, so equal bodies hash equal
	h := sha256.Sum256(append([]byte(kind+"\x00"), b...))
	return hex.EncodeToString(h[:])
}

// beginOp records a new operation, or finds the one an idempotency key names. replay
// is true when the key was seen before with the same request.
func (m *Manager) beginOp(ctx context.Context, call Call, kind, sandboxID string, body any) (op *store.Operation, replay bool, err error) {
	if op, err = m.newOp(ctx, call, kind, sandboxID, body); err != nil {
		return nil, false, err
	}
	existing, err := m.store.CreateOperation(ctx, op)
	if errors.Is(err, errdefs.ErrAlreadyExists) && existing != nil {
		if existing.RequestHash != op.RequestHash || existing.Kind != kind {
			return nil, false, errdefs.IdempotencyConflict(
				"Idempotency-Key %q was already used for a different request (operation %s)", call.IdempotencyKey, existing.ID).
				WithDetails(map[string]any{"operation_id": existing.ID})
		}
		return existing, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return op, false, nil
}

// openOp is beginOp, or newOp when stored is false: the operation is then stored only
// as it ends (endOp).
func (m *Manager) openOp(ctx context.Context, call Call, stored bool, kind, sandboxID string, body any) (end *endOp, replay bool, err error) {
	end = &endOp{newOp: !stored}
	if stored {
		end.op, replay, err = m.beginOp(ctx, call, kind, sandboxID, body)
	} else {
		end.op, err = m.newOp(ctx, call, kind, sandboxID, body)
	}
	return end, replay, err
}

// endOp is the operation of a create or a terminate asked for, which the write of the
// record it ends with (a pool claim's, a tombstone's) ends too when the store can make
// them one write (store.ClaimWriter).
type endOp struct {
	op    *store.Operation
	newOp bool // op is not stored yet
	ended bool // the record's write stored it ended
}

// finish ends e's operation as finishOp does (sandboxID, err), unless the record's
// write did, and returns what the caller hears.
func (e *endOp) finish(m *Manager, sandboxID string, err error) error {
	switch {
	case e.ended:
		m.opDone(e.op)
		return nil
	case e.newOp:
		return m.finishNewOp(e.op, sandboxID, err)
	}
	return m.finishOp(e.op, sandboxID, err)
}

// write stores sb and evs with e's operation succeeded, in one write of w; the
// operation is changed only once that is stored.
func (e *endOp) write(ctx context.Context, m *Manager, w store.ClaimWriter, sb *store.Sandbox, evs ...*store.Event) error {
	done := *e.op
	m.settleOp(&done, sb.ID, nil)
	if err := w.WriteClaim(ctx, store.Claim{Sandbox: sb, Op: &done, NewOp: e.newOp, Events: evs}); err != nil {
		return err
	}
	*e.op, e.ended = done, true
	m.notifyEvents()
	return nil
}

// newOp is a new operation, running, not yet stored.
func (m *Manager) newOp(ctx context.Context, call Call, kind, sandboxID string, body any) (*store.Operation, error) {
	now := m.now()
	if len(call.IdempotencyKey) > 256 {
		return nil, errdefs.Invalid("Idempotency-Key is longer than 256 characters")
	}
	key := call.IdempotencyKey
	if from := creatorOf(ctx); key != "" && from != "" {
		// Code inside a sandbox has keys of its own: one its owner (or a sibling) used
		// never replays that caller's operation to it.
		key = from + "/" + key
	}
	return &store.Operation{
		ID: newID("op_"), Kind: kind, Owner: call.Owner, SandboxID: sandboxID, State: store.OpRunning,
		IdempotencyKey: key, RequestHash: requestHash(kind, body),
		CreatedAt: now, UpdatedAt: now,
	}, nil
}

// finishOp records how an operation ended and returns err unchanged.
func (m *Manager) finishOp(op *store.Operation, sandboxID string, err error) error {
	return m.storeEnded(op, sandboxID, err, m.store.UpdateOperation)
}

// finishNewOp is finishOp for an operation newOp made and nothing stored: it is
// stored as it ended.
func (m *Manager) finishNewOp(op *store.Operation, sandboxID string, err error) error {
	return m.storeEnded(op, sandboxID, err, func(ctx context.Context, op *store.Operation) error {
		_, err := m.store.CreateOperation(ctx, op)
		return err
	})
}

// storeEnded ends op as settleOp does, counts it, and stores it with write.
func (m *Manager) storeEnded(op *store.Operation, sandboxID string, err error, write func(context.Context, *store.Operation) error) error {
	err = m.settleOp(op, sandboxID, err)
	m.opDone(op)
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	if uerr := write(ctx, op); uerr != nil {
		m.log.Error("record operation", "op", op.ID, "err", uerr)
		if err == nil {
			// Success that is not on record is no success to report: the stored
			// operation still says running, and the next start closes it as failed.
			return errdefs.Unavailable("the outcome of operation %s could not be recorded; the sandbox's state shows it", op.ID).
				WithCause(uerr).WithDetails(map[string]any{"operation_id": op.ID})
		}
	}
	if err != nil && op.ErrorCode == "internal" {
		err = &errdefs.Error{Class: errdefs.ErrInternal, Msg: op.ErrorMessage, Cause: err,
			Details: map[string]any{"operation_id": op.ID}}
	}
	return err
}

// settleOp sets in op how it ended (err, nil on success), the store not written, and
// returns err, or what callers hear of it.
func (m *Manager) settleOp(op *store.Operation, sandboxID string, err error) error {
	op.UpdatedAt = m.now()
	if sandboxID != "" {
		op.SandboxID = sandboxID
	}
	if code := errdefs.Code(err); err != nil && code == "internal" && nodeCondition(err) != "" {
		// Not a fault of the daemon's but a state of the node, which callers may hear.
		err = unavailable(err, "the %s failed", op.Kind)
	}
	if err != nil {
		op.State = store.OpFailed
		op.ErrorCode = errdefs.Code(err)
		op.ErrorMessage = errdefs.Message(err)
		if op.ErrorCode == "internal" {
			// What failed inside (a database, a host path) is the log's, not the caller's;
			// the first answer and every replay say the same.
			m.log.Error("operation failed", "op", op.ID, "kind", op.Kind, "err", err)
			op.ErrorMessage = errdefs.InternalMessage("operation", op.ID)
		}
	} else {
		op.State = store.OpSucceeded
	}
	return err
}

// replayed answers a repeated request with the outcome of the first one.
func (m *Manager) replayed(ctx context.Context, op *store.Operation) (*store.Operation, *store.Sandbox, error) {
	if op.State == store.OpFailed {
		return op, nil, &errdefs.Error{Class: errdefs.FromCode(op.ErrorCode), Msg: op.ErrorMessage,
			Details: map[string]any{"operation_id": op.ID}}
	}
	if op.SandboxID == "" {
		return op, nil, nil
	}
	sb, err := m.store.GetSandbox(ctx, op.SandboxID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return op, nil, nil
	}
	return op, sb, err
}

// event records a sandbox event; failures are logged, never returned.
func (m *Manager) event(sb *store.Sandbox, typ, cause string, data any) {
	m.storeEvent(m.newEvent(sb, typ, cause, data))
}

// storeEvent records ev, made by newEvent; failures are logged, never returned.
func (m *Manager) storeEvent(ev *store.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	if err := m.store.AppendEvent(ctx, ev); err != nil {
		m.log.Warn("record event", "sandbox", ev.SandboxID, "type", ev.Type, "err", err)
		return
	}
	m.notifyEvents()
}

// newEvent is an event of sb, not yet stored.
func (m *Manager) newEvent(sb *store.Sandbox, typ, cause string, data any) *store.Event {
	ev := &store.Event{SandboxID: sb.ID, Generation: sb.Generation, Type: typ, Cause: cause, Time: m.now()}
	if data != nil {
		ev.Data, _ = json.Marshal(data)
	}
	return ev
}

// setState moves sb to a new state through the state machine and stores it.
func (m *Manager) setState(ctx context.Context, sb *store.Sandbox, to State, cause string) error {
	if err := transition(sb.State, to); err != nil {
		return err
	}
	from := sb.State
	sb.State = to
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		sb.State = from
		return err
	}
	m.event(sb, "state", cause, map[string]string{"from": string(from), "to": string(to)})
	return nil
}
