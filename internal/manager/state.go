package manager

import (
	"fmt"
	"slices"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The sandbox states (DESIGN.md §3).
const (
	Creating    = "creating"
	Running     = "running"
	Suspending  = "suspending"
	Suspended   = "suspended"
	Resuming    = "resuming"
	Terminating = "terminating"
	Terminated  = "terminated"
	Failed      = "failed"
)

var states = []string{Creating, Running, Suspending, Suspended, Resuming, Terminating, Terminated, Failed}

// transitions lists every allowed move.
var transitions = map[string][]string{
	Creating:    {Running, Failed, Terminating, Terminated},
	Running:     {Suspending, Terminating, Failed, Terminated},
	Suspending:  {Suspended, Running, Failed, Terminating},
	Suspended:   {Resuming, Terminating},
	Resuming:    {Running, Suspended, Failed, Terminating},
	Terminating: {Terminated, Failed},
	Failed:      {Terminating, Terminated},
	Terminated:  {},
}

func validState(s string) bool { return slices.Contains(states, s) }

// TransitionError is a move the state machine does not allow.
type TransitionError struct{ From, To string }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("a %s sandbox cannot become %s", e.From, e.To)
}

// Is makes a TransitionError a failed precondition.
func (e *TransitionError) Is(target error) bool { return target == errdefs.ErrFailedPrecondition }

// transition checks a move.
func transition(from, to string) error {
	if slices.Contains(transitions[from], to) {
		return nil
	}
	return &TransitionError{From: from, To: to}
}
