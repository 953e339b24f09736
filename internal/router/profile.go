package router

import (
	"fmt"
	"math"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router/decision"
)

// Route decides where work of kind runs under s. For a command, a is its Score; an
// assessment whose score is not a number in [0, 1] counts as 1, so a scoring fault
// contains the command rather than letting it reach the host. Invalid settings or an
// unknown kind are an error: nothing should run.
func Route(s decision.Settings, kind decision.Kind, a Assessment) (decision.Decision, error) {
	if err := s.Validate(); err != nil {
		return decision.Decision{}, err
	}
	d := decision.Decision{Workspace: s.Workspace, Network: s.Network}
	label := s.Profile() + " profile"
	switch kind {
	case decision.KindCommand, decision.KindCode:
	default:
		return decision.Decision{}, errdefs.Invalid("kind %q: want command or code", kind)
	}
	switch {
	case s.Mode == decision.ModeOff:
		d.Place, d.Reason = decision.PlaceHost, label+": everything runs on the host"
		d.Workspace, d.Network = decision.WorkspaceRW, true
	case kind == decision.KindCommand && s.Scope == decision.ScopeCode:
		d.Place, d.Reason = decision.PlaceFence, label+": shell commands are out of scope and run on the host inside the fence"
	case s.Mode == decision.ModeAlways:
		d.Place, d.Reason = decision.PlaceSandbox, label+": everything runs in a sandbox"
	case kind == decision.KindCode:
		d.Place, d.Reason = decision.PlaceSandbox, label+": code is never judged, so it always runs in a sandbox"
	default:
		t := s.EffectiveThreshold()
		score := a.Score
		if math.IsNaN(score) || score < 0 || score > 1 {
			score = 1
		}
		if score >= t {
			d.Place = decision.PlaceSandbox
			d.Reason = fmt.Sprintf("%s: risk %.2f is at or above the threshold %.2f", label, score, t)
			if len(a.Reasons) > 0 {
				d.Reason += " (" + a.Reasons[0].Text + ")"
			}
		} else {
			d.Place = decision.PlaceFence
			d.Reason = fmt.Sprintf("%s: risk %.2f is below the threshold %.2f; runs on the host inside the fence", label, score, t)
		}
	}
	return d, nil
}

// Callers are the kinds of work the matrix (Matrix) covers.
const (
	CallerRunCode      = "run_code"           // code an agent wrote (airlock run-code)
	CallerShell        = "shell command"      // a shell command an agent runs (airlock run)
	CallerWorkflowStep = "workflow step"      // a step of a workflow a framework runs
	CallerVerification = "verification check" // a loop's pass/fail check (airlock fence)
	CallerMCPServer    = "MCP server"         // a third party's tool server (airlock fence)
)

// MatrixRow says which mechanism governs one kind of caller, and how.
type MatrixRow struct {
	Caller    string `json:"caller"`
	Mechanism string `json:"mechanism"` // "sandbox", "fence", "host" or "router" (each command decided)
	Behaviour string `json:"behaviour"`
}

// Matrix says, for each kind of caller, which mechanism governs it under s (valid
// settings): for code, shell commands and workflow steps, where Route puts them —
// "router" when a command's place depends on its score; for a verification check or an
// MCP server, which a framework wraps itself (airlock fence), the fence, unless the
// profile is off.
func Matrix(s decision.Settings) []MatrixRow {
	code, _ := Route(s, decision.KindCode, Assessment{})
	low, _ := Route(s, decision.KindCommand, Assessment{Score: 0})
	high, _ := Route(s, decision.KindCommand, Assessment{Score: 1})
	shell := MatrixRow{Caller: CallerShell, Mechanism: string(low.Place), Behaviour: low.Reason}
	if low.Place != high.Place {
		shell.Mechanism = "router"
		shell.Behaviour = fmt.Sprintf("%s profile: scored; in a sandbox at risk %.2f or more, else on the host inside the fence",
			s.Profile(), s.EffectiveThreshold())
	}
	step := shell
	step.Caller = CallerWorkflowStep
	fenced := func(caller string) MatrixRow {
		if s.Mode == decision.ModeOff {
			return MatrixRow{Caller: caller, Mechanism: string(decision.PlaceHost), Behaviour: low.Reason}
		}
		return MatrixRow{Caller: caller, Mechanism: string(decision.PlaceFence), Behaviour: "on the host inside the fence, whatever the profile decides for commands"}
	}
	return []MatrixRow{{Caller: CallerRunCode, Mechanism: string(code.Place), Behaviour: code.Reason},
		shell, step, fenced(CallerVerification), fenced(CallerMCPServer)}
}
