package manager

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// State is a sandbox's lifecycle state, as its record keeps it.
type State = store.State

// The sandbox states (DESIGN.md §3).
const (
	Creating    State = "creating"
	Running     State = "running"
	Suspending  State = "suspending"
	Suspended   State = "suspended"
	Resuming    State = "resuming"
	Terminating State = "terminating"
	Terminated  State = store.Terminated
	Failed      State = "failed"
	// Lost is a sandbox whose node's lease lapsed while it ran (or was being made,
	// suspended or resumed): its processes, and its changes since it last suspended,
	// were on that node (lost.go).
	Lost State = "lost"
)

var states = []State{Creating, Running, Suspending, Suspended, Resuming, Terminating, Terminated, Failed, Lost}

// transitions lists every allowed move.
var transitions = map[State][]State{
	Creating:    {Running, Failed, Terminating, Terminated, Lost},
	Running:     {Suspending, Terminating, Failed, Terminated, Lost},
	Suspending:  {Suspended, Running, Failed, Terminating, Terminated, Lost},
	Suspended:   {Resuming, Terminating, Terminated},
	Resuming:    {Running, Suspended, Failed, Terminating, Terminated, Lost},
	Terminating: {Terminated, Failed},
	Failed:      {Terminating, Terminated},
	Terminated:  {},
	// A lost sandbox resumes on the node that takes it (through resuming), goes back to
	// suspended when its own node returns with its layer, or is terminated.
	Lost: {Resuming, Suspended, Terminated},
}

// fencedStates are the states a sandbox is marked lost from when its node is: those in
// which its container ran, or was being made or stopped, on that node.
var fencedStates = []State{Creating, Running, Suspending, Resuming}

func validState(s State) bool { return slices.Contains(states, s) }

// TransitionError is a move the state machine does not allow.
type TransitionError struct{ From, To State }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("a %s sandbox cannot become %s", e.From, e.To)
}

// Is makes a TransitionError a failed precondition.
func (e *TransitionError) Is(target error) bool { return target == errdefs.ErrFailedPrecondition }

// transition checks a move.
func transition(from, to State) error {
	if slices.Contains(transitions[from], to) {
		return nil
	}
	return &TransitionError{From: from, To: to}
}

// Verb is something a caller asks of an existing sandbox.
type Verb string

// The verbs whose start depends on the sandbox's state.
const (
	VerbSuspend  Verb = "suspend"
	VerbResume   Verb = "resume"
	VerbUse      Verb = "use" // exec, files, sessions, terminals, ports: resumes a suspended sandbox
	VerbSnapshot Verb = "snapshot"
	VerbRestore  Verb = "restore"
	VerbFork     Verb = "fork"
	VerbNetwork  Verb = "network" // change its egress policy, expose or close a port
	VerbLifetime Verb = "lifetime"
	VerbSecret   Verb = "secret" // bind a secret to it
	VerbVolume   Verb = "volume" // attach or detach a volume
)

// precondition is from which states a verb may start, and what its refusal says.
type precondition struct {
	from   []State
	rule   string
	reason string // a machine-readable reason in the refusal's details, if any
}

// preconditions is the one table of which verb may start from which state; every verb
// consults it through may. Suspending a suspended sandbox and resuming a running one
// are allowed: they succeed at once.
var preconditions = map[Verb]precondition{
	VerbSuspend:  {from: []State{Running, Suspending, Suspended}, rule: "only a running sandbox can be suspended"},
	VerbResume:   {from: []State{Suspended, Resuming, Running, Lost}, rule: "only a suspended or lost sandbox can be resumed"},
	VerbUse:      {from: []State{Running, Suspended, Suspending, Resuming}, rule: "only a running or suspended sandbox can be used"},
	VerbSnapshot: {from: []State{Running, Suspended}, rule: "snapshots are of running or suspended sandboxes"},
	VerbRestore:  {from: []State{Suspended}, rule: "restore needs a suspended sandbox (suspend it first)", reason: "not_suspended"},
	VerbFork:     {from: []State{Running, Suspended}, rule: "forks are of running or suspended sandboxes"},
	VerbNetwork:  {from: []State{Creating, Running, Suspending, Suspended, Resuming, Failed}, rule: "a terminated sandbox has no network to change"},
	VerbLifetime: {from: []State{Running, Suspended}, rule: "only a running or suspended sandbox's lifetime can be changed"},
	VerbSecret:   {from: []State{Creating, Running, Suspending, Suspended, Resuming, Failed}, rule: "a terminating or terminated sandbox takes no new secrets"},
	VerbVolume:   {from: []State{Suspended}, rule: "volumes are attached to and detached from a suspended sandbox (suspend it first)", reason: "not_suspended"},
}

// may says whether verb may start on sb here: another node's sandbox is that node's to
// act on (its container is there, not here: acting on it here would find no container
// and record it gone), and then sb's state must allow verb.
func (m *Manager) may(verb Verb, sb *store.Sandbox) error {
	if sb.State == Lost && verb != VerbResume {
		return lostErr(sb)
	}
	if err := m.acting(); err != nil {
		return err
	}
	if err := m.onThisNode(sb); err != nil {
		return err
	}
	return may(verb, sb)
}

// onThisNode refuses a sandbox another node holds, naming that node.
func (m *Manager) onThisNode(sb *store.Sandbox) error {
	if m.ownRecord(sb) {
		return nil
	}
	return errdefs.Precondition("sandbox %q is on node %q, not on this node (%q): send the call to that node",
		sb.Name, sb.Node, m.cfg.NodeName).WithDetails(map[string]any{"node": sb.Node, "reason": "other_node"})
}

// may says whether verb may start on sb in its current state; the refusal is a failed
// precondition naming the state and the rule.
func may(verb Verb, sb *store.Sandbox) error {
	p, ok := preconditions[verb]
	if !ok {
		panic("manager: verb " + string(verb) + " has no precondition")
	}
	if slices.Contains(p.from, sb.State) {
		return nil
	}
	details := map[string]any{"state": sb.State, "verb": verb}
	if p.reason != "" {
		details["reason"] = p.reason
	}
	return errdefs.Precondition("sandbox %q is %s; %s", sb.Name, sb.State, p.rule).WithDetails(details)
}

// joinStates lists states for a message: "creating, running, …".
func joinStates(ss []State) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
