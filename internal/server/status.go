package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	out := api.Status{Version: s.opts.Version, StateDir: s.opts.StateDir, Checks: []api.Check{}}
	list, err := s.m.List(r.Context(), store.SandboxFilter{Owner: owner(r), States: []string{"running", "suspended", "creating"}})
	out.Checks = append(out.Checks, api.Check{Name: "store", OK: err == nil, Detail: "SQLite", Degrades: errText(err)})
	out.Sandboxes = len(list)
	if hc, ok := s.m.Driver().(runtime.HealthChecker); ok {
		for _, c := range hc.Health(r.Context()) {
			out.Checks = append(out.Checks, api.Check{Name: c.Name, OK: c.OK, Detail: c.Detail, Degrades: c.Degrades})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return "the daemon cannot read or write its records: " + err.Error()
}
