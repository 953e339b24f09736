package manager

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/router"
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
}

// RouteRequest is one command or code snippet to place. Nothing runs.
type RouteRequest struct {
	// Command is shell text; Argv is one command's words, scored as their quoted join.
	// A command request sets exactly one of them.
	Command string
	Argv    []string
	// Kind is router.KindCommand (the default when empty) or router.KindCode.
	Kind router.Kind
	// Language is a code snippet's: python, node or bash.
	Language string
	// Profile is off, safe or strict; empty means RouterConfig.Profile.
	Profile string
	// Workspace ("" keeps the profile's) and Network (nil keeps the profile's) tune the
	// profile; a tuned profile reads back as custom.
	Workspace router.WorkspaceAccess
	Network   *bool
}

// RouteDecision is where the work runs and why, with the assessment it rests on.
type RouteDecision struct {
	// Decision's Place is empty when no profile applies.
	router.Decision
	Assessment router.Assessment
	Profile    string // "" when no profile applies
	Threshold  float64
	// WorkspaceMount says that a sandbox of this node's default runtime can have a local
	// caller's workspace mounted (workspace.go); else the caller copies it in.
	WorkspaceMount bool
}

// Languages are the code snippets' languages the router knows.
var Languages = []string{"python", "node", "bash"}

// Route decides where a command or code snippet runs under the request's profile, or
// the node's default one. A request with no profile at all is scored but given no
// place. Invalid input is errdefs.ErrInvalidArgument; the decision is the router's
// alone (a command it cannot score is held to be high risk).
func (m *Manager) Route(call Call, req RouteRequest) (RouteDecision, error) {
	kind := req.Kind
	if kind == "" {
		kind = router.KindCommand
	}
	var text string
	switch kind {
	case router.KindCommand:
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
	case router.KindCode:
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
	case "", router.WorkspaceNone, router.WorkspaceRO, router.WorkspaceRW:
	default:
		return RouteDecision{}, errdefs.Invalid("workspace_access %q: want none, ro or rw", req.Workspace)
	}

	var a router.Assessment
	if kind == router.KindCommand {
		a = router.Score(text)
	}
	threshold := m.cfg.Router.Threshold
	if threshold == 0 {
		threshold = router.DefaultThreshold
	}
	name := req.Profile
	if name == "" {
		name = m.cfg.Router.Profile
	}
	out := RouteDecision{Assessment: a, Threshold: threshold,
		WorkspaceMount: m.cfg.WorkspaceDir != "" && m.defaultRuntime == "runc"}
	if name == "" {
		out.Reason = "no profile: none was asked for and the node has no router.profile, so the work runs as asked"
		return out, nil
	}
	s, err := router.ProfileSettings(name)
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
	return out, nil
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
