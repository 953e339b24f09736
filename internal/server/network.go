package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpstatus"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/portproxy"
)

func toAPINetwork(n manager.NetworkPolicy) api.NetworkPolicy {
	if n.Mode == "" {
		n = manager.DefaultNetwork
	}
	return api.NetworkPolicy{Mode: n.Mode, Allow: n.Allow, AllowPrivate: n.AllowPrivate}
}

func fromAPINetwork(n api.NetworkPolicy) manager.NetworkPolicy {
	return manager.NetworkPolicy{Mode: n.Mode, Allow: n.Allow, AllowPrivate: n.AllowPrivate}
}

func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.m.Resolve(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sb.Version))
	writeJSON(w, http.StatusOK, toAPINetwork(sb.Network))
	return nil
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	var req api.NetworkPolicy
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	op, sb, err := s.m.SetNetworkPolicy(r.Context(), c, r.PathValue("ref"), fromAPINetwork(req))
	return s.opResult(w, r, http.StatusOK, op, sb, err)
}

// egressLog lists a sandbox's egress decisions (events of type "egress").
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request) error {
	var after int64
	if a := r.URL.Query().Get("after"); a != "" {
		var err error
		if after, err = strconv.ParseInt(a, 10, 64); err != nil || after < 0 {
			return errdefs.Invalid("invalid after %q: an event sequence number", a)
		}
	}
	out := api.EgressLog{Records: []api.EgressRecord{}}
	for {
		evs, err := s.m.Events(r.Context(), s.scope(r), r.PathValue("ref"), after, false)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			after = ev.Seq
			switch ev.Type {
			case "records_dropped":
				var note struct {
					Types map[string]int64 `json:"types"`
				}
				json.Unmarshal(ev.Data, &note)
				out.Dropped += note.Types["egress"]
				continue
			case "egress":
			default:
				continue
			}
			var rec struct {
				Host, Addr, Method, Rule, Reason string
				Decision                         string
				Port                             int
				BytesUp, BytesDown               int64
				Allowed                          bool
				Repeats                          int64  `json:"repeats"`
				Summary                          string `json:"summary"`
			}
			json.Unmarshal(ev.Data, &rec)
			out.Records = append(out.Records, api.EgressRecord{Seq: ev.Seq, Generation: ev.Generation, Host: rec.Host,
				Addr: rec.Addr, Port: rec.Port, Method: rec.Method, BytesUp: rec.BytesUp, BytesDown: rec.BytesDown,
				Allowed: rec.Allowed, Decision: decisionOf(rec.Decision, rec.Allowed), Rule: rec.Rule, Reason: rec.Reason, Time: ev.Time,
				Repeats: rec.Repeats, Summary: rec.Summary})
		}
		if len(evs) < 1000 || len(out.Records) >= 5000 {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) portURL(sandboxID string, port int) string {
	base := s.opts.PublicURL
	if base == "" {
		base = "http://" + api.SocketHost // reached through the unix socket
	}
	return fmt.Sprintf("%s/v1/ports/%s/%d/", strings.TrimRight(base, "/"), sandboxID, port)
}

func (s *Server) toAPIPort(sb *manager.Sandbox, p manager.Port) api.Port {
	out := api.Port{Port: p.Port, Public: p.Public, URL: s.portURL(sb.ID, p.Port)}
	if !p.Public {
		out.Token = p.Token
	}
	return out
}

func (s *Server) exposePort(w http.ResponseWriter, r *http.Request) error {
	var req api.PortRequest
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	p, err := s.m.ExposePort(r.Context(), c, r.PathValue("ref"), req.Port, req.Public)
	if err != nil {
		return err
	}
	sb, err := s.m.Resolve(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.toAPIPort(sb, *p))
	return nil
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.m.Resolve(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	out := api.PortList{Ports: []api.Port{}}
	for _, p := range sb.Ports {
		out.Ports = append(out.Ports, s.toAPIPort(sb, p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) closePort(w http.ResponseWriter, r *http.Request) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		return errdefs.Invalid("invalid port %q", r.PathValue("port"))
	}
	c, err := s.call(r)
	if err != nil {
		return err
	}
	if err := s.m.ClosePort(r.Context(), c, r.PathValue("ref"), port); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ClosePortConns is the manager's PortCloser.
func (s *Server) ClosePortConns(sandboxID string, port int) { s.ports.CloseAll(sandboxID, port) }

// portProxy forwards a request to an exposed port inside the sandbox's network
// namespace (to its loopback, so a server bound to 127.0.0.1 works too).
func (s *Server) portProxy(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("sandbox")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return errdefs.NotFound("no such exposed port")
	}
	token := r.Header.Get("X-Airlock-Port-Token")
	if token == "" {
		token = r.URL.Query().Get("airlock_token")
	}
	dial, err := s.m.OpenPort(r.Context(), id, port, token)
	if done, err := s.forwardPort(w, r, err); done || err != nil {
		return err
	}
	s.ports.Serve(w, r, portproxy.Target{SandboxID: id, Port: port, Dial: dial,
		Touch: func() { s.m.Touch(id) },
		Strip: []string{"X-Airlock-Port-Token", "Authorization"},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Path = "/" + r.PathValue("rest")
			q := pr.Out.URL.Query()
			q.Del("airlock_token")
			pr.Out.URL.RawQuery = q.Encode()
		},
		Failed: func(w http.ResponseWriter, err error) {
			// Nothing listening (yet) is the sandbox's business, not a daemon failure: the
			// caller hears why, and the log says so at debug level only.
			s.log.Debug("exposed port did not answer", "sandbox", id, "port", port, "err", err)
			e := errdefs.Unavailable("nothing answered on port %d in the sandbox: is a server listening there?", port)
			writeJSON(w, httpstatus.Status(e), api.ErrorBody{Error: api.Error{Code: errdefs.Code(e), Message: errdefs.Message(e)}})
		},
	})
	return nil
}

// decisionOf is a record's decision; records from before decisions were kept have only
// whether they were allowed.
func decisionOf(decision string, allowed bool) string {
	switch {
	case decision != "":
		return decision
	case allowed:
		return "allow"
	}
	return "deny"
}
