package manager

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
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
