package manager

import (
	"context"
	"slices"
	"strings"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router"
	"github.com/airlockhq/airlock/internal/router/decision"
	"github.com/airlockhq/airlock/internal/runtime"
)

// RouterConfig is the command router's defaults.
type RouterConfig struct {
	// Profile decides a request that names no profile; empty means none, and such a
	// request is answered with no place (the caller runs the work as it would without
	// the router).
	Profile string
	// Threshold is the risk score at or above which the safe profile contains a
	// command (0: router.DefaultThreshold).
	Threshold float64
	// FailClosed refuses work a profile would contain while no runtime can run
	// sandboxes (the router is degraded), rather than run it on the host in the fence.
	FailClosed bool
}

// RouterState says whether the router can contain what its profile contains.
type RouterState string

const (
	// RouterLive: a runtime works, and work is contained as the profile says.
	RouterLive RouterState = "live"
	// RouterDegraded: the profile contains work but no runtime can run sandboxes: such
	// work runs on the host in the fence (with a sandbox.degraded record in the audit
	// log), or is refused with FailClosed.
	RouterDegraded RouterState = "degraded"
	// RouterOff: no profile, or the off profile: work runs on the host by design.
	RouterOff RouterState = "off"
)

// RouterStatus is the router's state under the node's profile.
type RouterStatus struct {
	State      RouterState
	Profile    string // the node's router.profile; "" for none
	FailClosed bool
	Reason     string
	// Matrix says which mechanism governs each kind of caller under the profile (none
	// without one).
	Matrix []router.MatrixRow
}

// runtimeCheckTTL is how long the answer of runtimeWorks is kept: a route is asked for
// each command, and checking the runtime runs a program.
const runtimeCheckTTL = 5 * time.Second

// runtimeWorks reports whether the default runtime can run sandboxes (its health
// checks that are not optional pass), and if not, why.
func (m *Manager) runtimeWorks(ctx context.Context) (bool, string) {
	m.rtMu.Lock()
	defer m.rtMu.Unlock()
	if now := time.Now(); m.rtChecked.IsZero() || now.Sub(m.rtChecked) > runtimeCheckTTL || now.Before(m.rtChecked) {
		m.rtOK, m.rtWhy = true, ""
		if hc, ok := m.Driver().(runtime.HealthChecker); ok {
			for _, c := range hc.Health(ctx) {
				if !c.OK && !c.Optional {
					m.rtOK, m.rtWhy = false, m.defaultRuntime+" "+c.Name+": "+c.Degrades
					break
				}
			}
		}
		m.rtChecked = now
	}
	return m.rtOK, m.rtWhy
}

// RouterStatus reports the router's state under the node's profile.
func (m *Manager) RouterStatus(ctx context.Context) RouterStatus {
	st := RouterStatus{Profile: m.cfg.Router.Profile, FailClosed: m.cfg.Router.FailClosed}
	s, err := decision.ProfileSettings(st.Profile)
	if err != nil {
		st.State, st.Reason = RouterOff, "no router profile: work runs as asked (a request may name a profile)"
		return st
	}
	s.Threshold = m.cfg.Router.Threshold
	st.Matrix = router.Matrix(s)
	if s.Mode == decision.ModeOff {
		st.State, st.Reason = RouterOff, "the off profile: everything runs on the host, by design"
		return st
	}
	ok, why := m.runtimeWorks(ctx)
	switch {
	case ok:
		st.State, st.Reason = RouterLive, "a runtime works: work is contained as the "+st.Profile+" profile says"
	case st.FailClosed:
		st.State, st.Reason = RouterDegraded, "no runtime can run sandboxes ("+why+"): work the profile contains is refused (router.fail_closed)"
	default:
		st.State, st.Reason = RouterDegraded, "no runtime can run sandboxes ("+why+"): work the profile contains runs on the host inside the fence instead"
	}
	return st
}

// RouteRequest is one command or code snippet to place. Nothing runs.
type RouteRequest struct {
	// Command is shell text; Argv is one command's words, scored as their quoted join.
	// A command request sets exactly one of them.
	Command string
	Argv    []string
	// Kind is router.KindCommand (the default when empty) or router.KindCode.
	Kind decision.Kind
	// Language is a code snippet's: python, node or bash.
	Language string
	// Profile is off, safe or strict; empty means RouterConfig.Profile.
	Profile string
	// Workspace ("" keeps the profile's) and Network (nil keeps the profile's) tune the
	// profile; a tuned profile reads back as custom.
	Workspace decision.WorkspaceAccess
	Network   *bool
}

// RouteDecision is where the work runs and why, with the assessment it rests on.
type RouteDecision struct {
	// Decision's Place is empty when no profile applies.
	decision.Decision
	Assessment router.Assessment
	Profile    string // "" when no profile applies
	Threshold  float64
	// WorkspaceMount says that a sandbox of this node's default runtime can have a local
	// caller's workspace mounted (workspace.go); else the caller copies it in.
	WorkspaceMount bool
	// WorkspaceRuntimes names the node's runtimes whose sandboxes can have a local
	// caller's workspace mounted (empty when none can, or the node mounts none).
	WorkspaceRuntimes []string
	// Degraded says the work would be in a sandbox, but no runtime can run one: it runs
	// on the host in the fence instead (the router is degraded).
	Degraded bool
}

// Languages are the code snippets' languages the router knows.
var Languages = []string{"python", "node", "bash"}

// Route decides where a command or code snippet runs under the request's profile, or
// the node's default one. A request with no profile at all is scored but given no
// place. Invalid input is errdefs.ErrInvalidArgument; the decision is the router's
// alone (a command it cannot score is held to be high risk).
func (m *Manager) Route(ctx context.Context, call Call, req RouteRequest) (RouteDecision, error) {
	kind := req.Kind
	if kind == "" {
		kind = decision.KindCommand
	}
	var text string
	switch kind {
	case decision.KindCommand:
		switch {
		case req.Language != "":
			return RouteDecision{}, errdefs.Invalid("language is for code, not for a command")
		case (req.Command == "") == (len(req.Argv) == 0):
			return RouteDecision{}, errdefs.Invalid("give the command either as shell text (command) or as words (argv), not both and not neither")
		case req.Command != "":
			text = req.Command
		default:
			var err error
			if text, err = quoteArgv(req.Argv); err != nil {
				return RouteDecision{}, err
			}
		}
	case decision.KindCode:
		if req.Command != "" || len(req.Argv) > 0 {
			return RouteDecision{}, errdefs.Invalid("code is not scored: send its language, not its text")
		}
		if !slices.Contains(Languages, req.Language) {
			return RouteDecision{}, errdefs.Invalid("language %q: want one of %s", req.Language, strings.Join(Languages, ", "))
		}
	default:
		return RouteDecision{}, errdefs.Invalid("kind %q: want command or code", req.Kind)
	}
	switch req.Workspace {
	case "", decision.WorkspaceNone, decision.WorkspaceRO, decision.WorkspaceRW:
	default:
		return RouteDecision{}, errdefs.Invalid("workspace_access %q: want none, ro or rw", req.Workspace)
	}

	var a router.Assessment
	if kind == decision.KindCommand {
		a = router.Score(text)
	}
	threshold := m.cfg.Router.Threshold
	if threshold == 0 {
		threshold = decision.DefaultThreshold
	}
	name := req.Profile
	if name == "" {
		name = m.cfg.Router.Profile
	}
	out := RouteDecision{Assessment: a, Threshold: threshold,
		WorkspaceMount: m.cfg.WorkspaceDir != "" && m.mountsWorkspace("")}
	if m.cfg.WorkspaceDir != "" {
		out.WorkspaceRuntimes = m.workspaceRuntimes()
	}
	if name == "" {
		out.Reason = "no profile: none was asked for and the node has no router.profile, so the work runs as asked"
		return out, nil
	}
	s, err := decision.ProfileSettings(name)
	if err != nil {
		return RouteDecision{}, err
	}
	s.Threshold = threshold
	if req.Workspace != "" {
		s.Workspace = req.Workspace
	}
	if req.Network != nil {
		s.Network = *req.Network
	}
	d, err := router.Route(s, kind, a)
	if err != nil {
		return RouteDecision{}, err
	}
	out.Decision, out.Profile = d, s.Profile()
	if d.Place == decision.PlaceSandbox {
		if ok, why := m.runtimeWorks(ctx); !ok {
			if m.cfg.Router.FailClosed {
				m.auditDegraded(ctx, call.Owner, text, kind, "refused", d.Reason)
				return RouteDecision{}, errdefs.Unavailable("the router is degraded: no runtime can run sandboxes here (%s), and router.fail_closed refuses what the %s profile contains rather than run it on the host (%s)", why, out.Profile, d.Reason)
			}
			out.Place, out.Degraded = decision.PlaceFence, true
			out.Reason = "degraded: no runtime can run sandboxes here (" + why + "), so on the host inside the fence instead of a sandbox (" + d.Reason + ")"
			m.auditDegraded(ctx, call.Owner, text, kind, "fence", d.Reason)
			m.log.Warn("router degraded: contained work runs on the host in the fence", "owner", call.Owner, "runtime", why)
		}
	}
	return out, nil
}

// auditDegraded records a sandbox.degraded entry: work the profile would contain, with
// no runtime to contain it, run on the host in the fence or refused (result).
func (m *Manager) auditDegraded(ctx context.Context, owner, text string, kind decision.Kind, result, reason string) {
	if m.auditLog == nil {
		return
	}
	d := map[string]any{"kind": string(kind), "reason": audit.Clip(reason)}
	if text != "" {
		d["command"] = audit.Clip(text)
	}
	if err := m.auditLog.Append(ctx, audit.Entry{Identity: owner, Action: "sandbox.degraded", Result: result, Detail: d}); err != nil {
		m.log.Error("audit log", "err", err)
	}
}

// quoteArgv is argv as one line of shell text, each word quoted as bash needs it.
func quoteArgv(argv []string) (string, error) {
	quoted := make([]string, len(argv))
	for i, w := range argv {
		q, err := syntax.Quote(w, syntax.LangBash)
		if err != nil {
			return "", errdefs.Invalid("argv[%d] cannot be written as shell text (%v); send the command as shell text instead", i, err)
		}
		quoted[i] = q
	}
	return strings.Join(quoted, " "), nil
}
