package server

import (
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// sandboxStats answers GET /v1/sandboxes/{ref}/stats: the sandbox's latest usage, with
// its history (?history=1), or a line of it every sampling interval (?follow=1) until
// the caller goes away or the sandbox is terminated. Reading usage is not traffic: it
// keeps no sandbox awake.
func (s *Server) sandboxStats(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k := range q {
		if k != "history" && k != "follow" {
			return errdefs.Invalid("unknown query parameter %q; use history and follow", k)
		}
	}
	history, err := flagParam(q.Get("history"), "history")
	if err != nil {
		return err
	}
	follow, err := flagParam(q.Get("follow"), "follow")
	if err != nil {
		return err
	}
	ctx, ref := r.Context(), r.PathValue("ref")
	st, err := s.m.SandboxStats(ctx, s.scope(r), ref, history)
	if err != nil {
		return err
	}
	if !follow {
		writeJSON(w, http.StatusOK, st)
		return nil
	}
	emit := ndjson[api.SandboxStats](w)
	t := time.NewTicker(max(s.m.UsageInterval(), 100*time.Millisecond))
	defer t.Stop()
	for {
		emit(st)
		if st.State == string(manager.Terminated) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if st, err = s.m.SandboxStats(ctx, s.scope(r), ref, history); err != nil {
			return nil // gone, or the caller went away: the stream ends
		}
	}
}

// allStats answers GET /v1/stats: the usage of every sandbox the caller sees that is
// not terminated (every owner's, for an administrator who asks with all_owners=true).
func (s *Server) allStats(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k := range q {
		if k != "all_owners" {
			return errdefs.Invalid("unknown query parameter %q; use all_owners", k)
		}
	}
	who := owner(r)
	if all, err := s.allOwners(r, "reading every owner's sandboxes' usage"); err != nil {
		return err
	} else if all {
		who = ""
	}
	list, err := s.m.AllStats(r.Context(), who, visible(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.StatsList{Sandboxes: list})
	return nil
}

// allOwners reads the all_owners query parameter ("", "false" or "true"); true is for
// administrators only, what names the request in the refusal.
func (s *Server) allOwners(r *http.Request, what string) (bool, error) {
	switch all := r.URL.Query().Get("all_owners"); all {
	case "", "false":
		return false, nil
	case "true":
		if err := s.adminOnly(r, what+" (all_owners=true)"); err != nil {
			return false, err
		}
		return true, nil
	default:
		return false, errdefs.Invalid("invalid all_owners %q: true or false", all)
	}
}

// flagParam reads a boolean query parameter: "", "0" and "false" are off, "1" and
// "true" on.
func flagParam(v, name string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errdefs.Invalid("invalid %s %q: 1, true, 0 or false", name, v)
}

// metrics answers GET /metrics: the node's Prometheus series, for callers holding
// metrics.read (a scraper's token; admin holds it too). They count every owner's
// sandboxes on the node, so no other permission reads them, and no sandbox does.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Metrics == nil {
		return errdefs.Unavailable("this node serves no metrics")
	}
	s.opts.Metrics.ServeHTTP(w, r)
	return nil
}
