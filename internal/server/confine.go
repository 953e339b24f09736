package server

import (
	"net/http"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// Code inside a sandbox reaches the API with its session credential, as the sandbox's
// owner acting with the sandbox's role. Whatever that role grants, such code is held to
// the sandbox's own reach: it acts on its own sandbox and on the sandboxes it created,
// never on its owner's others (which may hold files, secrets and sessions it must not
// see), and it never does what would put a real credential or secret within its reach
// (tokens, secrets, bindings) or administer the node. Another sandbox is "not found",
// as another owner's is, in every answer: no listing, count or record names it.
//
// Every route says how far such a request goes (its reach, in the route table); a route
// without one is refused from inside sandboxes.

// reach is how far a request from inside a sandbox goes on a route.
type reach int

const (
	// unclassified routes are refused from inside sandboxes.
	unclassified reach = iota
	// outside routes are refused from inside sandboxes: credentials, secrets, the
	// audit log, the node's administration.
	outside
	// public routes answer nothing of the owner's (the contract, roles, the caller
	// itself, a route decision), or carry their own token (exposed ports).
	public
	// ownSandbox routes are about the sandbox {ref}, which must be reached.
	ownSandbox
	// ownSnapshot routes are about the snapshot {id}, whose sandbox must be reached.
	ownSnapshot
	// ownOperation routes are about the operation {id}, whose sandbox must be reached.
	ownOperation
	// namedSandbox routes list the records of the sandbox ?sandbox=, which must be
	// named and reached.
	namedSandbox
	// filtered routes list or count the owner's sandboxes; their handlers keep only
	// the ones reached (see visible).
	filtered
	// creates makes a sandbox, which the caller then reaches (it created it).
	creates
	// shared routes are about the owner's images, which its sandboxes share; an answer
	// that lists an image's users keeps only the sandboxes reached.
	shared
)

var reachNames = map[reach]string{outside: "outside", public: "public", ownSandbox: "own sandbox",
	ownSnapshot: "own snapshot", ownOperation: "own operation", namedSandbox: "named sandbox", filtered: "filtered", creates: "creates", shared: "shared"}

// confine refuses what a request from inside a sandbox may not do; it is nil for every
// other caller.
func (s *Server) confine(r *http.Request, perm auth.Permission, how reach) error {
	p := principal(r)
	if p == nil || p.Sandbox == "" {
		return nil
	}
	deny := func(what string) error {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "from inside sandbox " + p.Sandbox + ", " + what}
	}
	if perm == auth.Admin || perm == auth.SandboxAdmin {
		return deny("administering the node is refused; it is done from outside sandboxes")
	}
	switch how {
	case public, filtered, creates, shared:
		return nil
	case ownSandbox:
		return s.reachSandbox(r, p.Sandbox, r.PathValue("ref"))
	case ownSnapshot:
		return s.reachSnapshot(r, p.Sandbox, r.PathValue("id"))
	case ownOperation:
		id := r.PathValue("id")
		op, err := s.m.Operation(r.Context(), owner(r), id)
		if err != nil {
			return err
		}
		if op.SandboxID == "" || s.reachSandbox(r, p.Sandbox, op.SandboxID) != nil {
			return errdefs.NotFound("operation %q not found", id)
		}
		return nil
	case namedSandbox:
		ref := r.URL.Query().Get("sandbox")
		if ref == "" {
			return deny("name the sandbox whose records to list (?sandbox=ID): its own, or one it created")
		}
		return s.reachSandbox(r, p.Sandbox, ref)
	case outside:
		return deny("this is done from outside sandboxes only: API tokens, secrets and registry logins, " +
			"the audit log and the node's administration are out of a sandbox's reach (it uses its session credential " +
			"and the secrets bound to it)")
	}
	return deny("this route is not open to sandboxes")
}

// reaches says whether code inside sandbox from may act on sb: itself, or one it created.
func reaches(from string, sb *manager.Sandbox) bool {
	return sb.ID == from || sb.CreatedBy == from
}

// visible is nil for a caller outside sandboxes; for code inside one, it keeps the
// sandboxes that code reaches. Listings and counts over the owner's sandboxes pass it on.
func visible(r *http.Request) func(*manager.Sandbox) bool {
	p := principal(r)
	if p == nil || p.Sandbox == "" {
		return nil
	}
	return func(sb *manager.Sandbox) bool { return reaches(p.Sandbox, sb) }
}

// reachSandbox refuses ref unless code inside sandbox from reaches it.
func (s *Server) reachSandbox(r *http.Request, from, ref string) error {
	sb, err := s.m.Resolve(r.Context(), owner(r), ref)
	if err != nil {
		return err
	}
	if !reaches(from, sb) {
		return errdefs.NotFound("sandbox %q not found", ref)
	}
	return nil
}

// reachSnapshot refuses a snapshot unless code inside sandbox from reaches the sandbox
// it was taken of.
func (s *Server) reachSnapshot(r *http.Request, from, id string) error {
	man, err := s.m.SnapshotOwned(r.Context(), owner(r), id)
	if err != nil {
		return err
	}
	if s.reachSandbox(r, from, man.SandboxID) != nil {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	return nil
}
