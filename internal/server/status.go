package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// status reports the daemon's health. Host facts (the state directory, and the details
// of checks, which name host paths and versions) are for the node's administrators, the
// unix socket's users; a TCP owner sees which checks pass and what a failure degrades.
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	admin := isAdmin(r)
	out := api.Status{Version: s.opts.Version, Checks: []api.Check{}}
	if admin {
		out.StateDir = s.opts.StateDir
		if pools, err := s.m.Pools(r.Context()); err == nil {
			out.Pools = toAPIPools(pools)
		}
	}
	h := s.m.Health(r.Context(), owner(r), visible(r))
	out.Sandboxes, out.Runtimes = h.Sandboxes, s.m.Runtimes()
	for _, c := range h.Checks {
		out.Checks = append(out.Checks, api.Check{Name: c.Name, OK: c.OK, Detail: c.Detail, Degrades: c.Degrades, Optional: c.Optional})
	}
	rs := s.m.RouterStatus(r.Context())
	out.Router = &api.RouterStatus{State: string(rs.State), Profile: rs.Profile, FailClosed: rs.FailClosed, Reason: rs.Reason,
		Matrix: []api.RouterMatrixRow{}}
	for _, row := range rs.Matrix {
		out.Router.Matrix = append(out.Router.Matrix, api.RouterMatrixRow{Caller: row.Caller, Mechanism: row.Mechanism, Behaviour: row.Behaviour})
	}
	if !admin {
		for i := range out.Checks {
			out.Checks[i].Detail = ""
		}
		if !out.Checks[0].OK {
			out.Checks[0].Degrades = "the daemon cannot read or write its records"
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// gc removes (or with dry_run=true lists) leftover host resources. Only the node's
// local users (the unix socket) may run it.
func (s *Server) gc(w http.ResponseWriter, r *http.Request) error {
	if !isAdmin(r) {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "gc is for the node's administrators: use the unix socket"}
	}
	dry := r.URL.Query().Get("dry_run") == "true"
	list, err := s.m.GC(r.Context(), dry)
	if err != nil {
		return err
	}
	out := api.GCResult{DryRun: dry, Leftovers: []api.Leftover{}}
	for _, l := range list {
		out.Leftovers = append(out.Leftovers, api.Leftover{SandboxID: l.SandboxID, Reason: l.Reason})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
