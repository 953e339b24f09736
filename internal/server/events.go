package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

func toAPIEvent(ev *manager.Event) api.Event {
	out := api.Event{Seq: ev.Seq, SandboxID: ev.SandboxID, Generation: ev.Generation, Type: ev.Type, Cause: ev.Cause, Time: ev.Time}
	if len(ev.Data) > 0 {
		json.Unmarshal(ev.Data, &out.Data)
	}
	return out
}

// events lists events, or with follow=true streams them as NDJSON until the client goes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var after int64
	if a := q.Get("after"); a != "" {
		var err error
		if after, err = strconv.ParseInt(a, 10, 64); err != nil || after < 0 {
			return errdefs.Invalid("invalid after %q: an event sequence number", a)
		}
	}
	ref := q.Get("sandbox")
	if q.Get("follow") != "true" {
		evs, err := s.m.Events(r.Context(), owner(r), ref, after, false)
		if err != nil {
			return err
		}
		out := api.EventList{Events: []api.Event{}}
		for _, ev := range evs {
			out.Events = append(out.Events, toAPIEvent(ev))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	// Refuse a bad sandbox reference before the stream starts.
	if ref != "" {
		if _, err := s.m.Resolve(r.Context(), owner(r), ref); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	for {
		evs, err := s.m.Events(r.Context(), owner(r), ref, after, true)
		if err != nil {
			return nil // the client went away
		}
		for _, ev := range evs {
			enc.Encode(toAPIEvent(ev))
			after = ev.Seq
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
