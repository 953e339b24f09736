package manager

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
)

// TestPreconditionTable checks may against the table for every verb and state, and the
// table against the state machine: a verb that moves a sandbox (suspend, resume) may
// start only where that move is allowed or already made.
func TestPreconditionTable(t *testing.T) {
	for verb, p := range preconditions {
		for _, st := range states {
			err := may(verb, &store.Sandbox{Name: "box", State: st})
			allowed := slices.Contains(p.from, st)
			if allowed != (err == nil) {
				t.Errorf("may(%s) from %s = %v; the table allows it: %v", verb, st, err, allowed)
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), string(st)) || !strings.Contains(err.Error(), p.rule) {
				t.Errorf("may(%s) from %s: %v; want a failed precondition naming the state and the rule", verb, st, err)
			}
		}
	}
	moves := map[Verb][2]State{VerbSuspend: {Suspending, Suspended}, VerbResume: {Resuming, Running}}
	for verb, m := range moves {
		for _, from := range preconditions[verb].from {
			if from != m[0] && from != m[1] && transition(from, m[0]) != nil {
				t.Errorf("%s may start from %s, which cannot become %s", verb, from, m[0])
			}
		}
	}
	for _, st := range []State{Terminating, Terminated} {
		for verb := range preconditions {
			if may(verb, &store.Sandbox{State: st}) == nil {
				t.Errorf("%s may start on a %s sandbox", verb, st)
			}
		}
	}
}

// TestVerbsRefuseThroughTheTable checks that setting a lifetime, binding a secret and
// opening or closing a port refuse a sandbox in a state their row does not allow with the
// table's failed precondition, and change nothing.
func TestVerbsRefuseThroughTheTable(t *testing.T) {
	m, _, st := newTestManager(t)
	ctx := context.Background()
	svc, err := secret.Open(st, filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	m.SetSecrets(svc, nil)
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.ExposePort(ctx, local, sb.ID, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	verbs := []struct {
		verb Verb
		do   func() error
	}{
		{VerbLifetime, func() error { _, _, err := m.SetLifetime(ctx, local, sb.ID, time.Hour); return err }},
		{VerbSecret, func() error {
			_, err := m.BindSecret(ctx, "local", sb.ID, secret.BindRequest{Secret: "gh", Target: "GH_TOKEN"})
			return err
		}},
		{VerbUse, func() error { _, err := m.OpenPort(ctx, sb.ID, 8000, p.Token); return err }},
		{VerbNetwork, func() error { return m.ClosePort(ctx, local, sb.ID, 8000) }},
	}
	for _, state := range []State{Creating, Terminating, Terminated} {
		rec, err := st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec.State = state
		if err := st.UpdateSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
		for _, v := range verbs {
			if slices.Contains(preconditions[v.verb].from, state) {
				continue
			}
			err := v.do()
			want := may(v.verb, rec)
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || err.Error() != want.Error() || errdefs.Details(err)["verb"] != v.verb {
				t.Errorf("%s on a %s sandbox: %v (details %v); want the table's refusal %q", v.verb, state, err, errdefs.Details(err), want)
			}
		}
		after, err := st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.State != state || !after.ExpiresAt.Equal(rec.ExpiresAt) || len(after.Ports) != 1 {
			t.Errorf("refused verbs on a %s sandbox changed it: state %s, expires %v (was %v), ports %v", state, after.State, after.ExpiresAt, rec.ExpiresAt, after.Ports)
		}
		if b, err := svc.BindingsOf(ctx, "local", sb.ID); err != nil || len(b) != 0 {
			t.Errorf("a refused bind on a %s sandbox left bindings %v (%v)", state, b, err)
		}
	}
}

// undeletable is a fake driver whose Delete fails.
type undeletable struct{ *fake.Driver }

func (undeletable) Delete(context.Context, string) error { return errors.New("device busy") }

// TestCreateRollbackMovesThroughTheStateMachine checks that a create whose resources
// cannot be removed leaves a failed record by a move of the state machine, with its
// state event, so that watchers and recovery see it.
func TestCreateRollbackMovesThroughTheStateMachine(t *testing.T) {
	fd := newFake(t)
	m, st := newManagerWith(t, DefaultConfig(), undeletable{fd})
	ctx := context.Background()
	fd.FailNextStart(errors.New("runc exploded"))
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create: %v; want unavailable", err)
	}
	list, err := st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("records after a rollback that could not delete: %v (%v); want the one kept for recovery", list, err)
	}
	sb := list[0]
	if sb.State != Failed || sb.Failure == "" {
		t.Errorf("kept record: state %s, failure %q; want failed, saying why", sb.State, sb.Failure)
	}
	evs, err := st.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e *store.Event) bool {
		return e.Type == "state" && strings.Contains(string(e.Data), `"from":"creating"`) && strings.Contains(string(e.Data), `"to":"failed"`)
	}) {
		t.Errorf("no state event from creating to failed among %d events", len(evs))
	}
}

// TestNodeOfUnknownSandbox: the node of a reference that names no sandbox is its
// not-found error, for the handler to answer.
func TestNodeOfUnknownSandbox(t *testing.T) {
	m, _, _ := newTestManager(t)
	if node, err := m.NodeOf(context.Background(), "local", "nope", true); !errors.Is(err, errdefs.ErrNotFound) || node != "" {
		t.Fatalf("NodeOf(nope) = %q, %v; want not found", node, err)
	}
}
