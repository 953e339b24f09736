package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/router/decision"
)

// route says where a command or code snippet would run under a profile, and why. It
// runs nothing.
func (s *Server) route(w http.ResponseWriter, r *http.Request) error {
	var req api.RouteRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	d, err := s.m.Route(r.Context(), manager.Call{Owner: owner(r), Admin: isAdmin(r)}, manager.RouteRequest{
		Command: req.Command, Argv: req.Argv, Kind: decision.Kind(req.Kind), Language: req.Language,
		Profile: req.Profile, Workspace: decision.WorkspaceAccess(req.WorkspaceAccess), Network: req.Network,
	})
	if err != nil {
		return err
	}
	out := api.RouteDecision{
		Place: string(d.Place), Reason: d.Reason, Score: d.Assessment.Score, Reasons: []api.RouteReason{},
		Profile: d.Profile, Threshold: d.Threshold, WorkspaceAccess: string(d.Workspace), Network: d.Network,
		WorkspaceMount: d.WorkspaceMount, WorkspaceRuntimes: d.WorkspaceRuntimes, Degraded: d.Degraded,
	}
	for _, rs := range d.Assessment.Reasons {
		out.Reasons = append(out.Reasons, api.RouteReason{Code: rs.Code, Text: rs.Text})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
