package server

import (
	"net/http"
	"strings"

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
// as another owner's is.

// confine refuses what a request from inside a sandbox may not do; it is nil for every
// other caller.
func (s *Server) confine(r *http.Request, pattern string, perm auth.Permission) error {
	p := principal(r)
	if p == nil || p.Sandbox == "" {
		return nil
	}
	deny := func(what string) error {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "from inside sandbox " + p.Sandbox + ", " + what}
	}
	method, path, _ := strings.Cut(pattern, " ")
	switch {
	case perm == auth.Admin || perm == auth.SandboxAdmin:
		return deny("administering the node is refused; it is done from outside sandboxes")
	case strings.HasPrefix(path, "/v1/secrets") && method != http.MethodGet, strings.HasPrefix(path, "/v1/registries"):
		return deny("secrets and registry logins are created, bound, rotated and revoked from outside sandboxes only")
	case strings.HasPrefix(path, "/v1/tokens"):
		return deny("API tokens are made and listed from outside sandboxes only: a sandbox uses its session credential")
	case path == "/v1/audit":
		return deny("the audit log is read from outside sandboxes")
	}
	switch {
	case strings.HasPrefix(path, "/v1/sandboxes/{ref}"):
		return s.reachSandbox(r, p.Sandbox, r.PathValue("ref"))
	case strings.HasPrefix(path, "/v1/snapshots/{id}"):
		return s.reachSnapshot(r, p.Sandbox, r.PathValue("id"))
	case path == "/v1/events" || path == "/v1/snapshots":
		ref := r.URL.Query().Get("sandbox")
		if ref == "" {
			return deny("name the sandbox whose records to list (?sandbox=ID): its own, or one it created")
		}
		return s.reachSandbox(r, p.Sandbox, ref)
	}
	return nil
}

// reaches says whether code inside sandbox from may act on sb: itself, or one it created.
func reaches(from string, sb *manager.Sandbox) bool {
	return sb.ID == from || sb.CreatedBy == from
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
