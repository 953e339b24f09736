package server

import (
	"github.com/airlockhq/airlock/internal/forward"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpedge"
)

// mutating says whether a request may change something.
func mutating(r *http.Request) bool {
	return r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
}

// source says where a request came from: the unix socket's peer or a TCP address.
func source(r *http.Request) string {
	if node := forward.From(r.Context()); node != "" {
		c, _ := r.Context().Value(forwardedKey{}).(forward.Caller)
		return "node " + node + " (forwarded; there: " + c.Source + ")"
	}
	if sb, ok := r.Context().Value(sandboxKey).(string); ok {
		return "sandbox " + sb + " (session credential, through the egress proxy)"
	}
	if uid, ok := r.Context().Value(peerKey).(int); ok {
		return "unix uid " + strconv.Itoa(uid)
	}
	return "tcp " + r.RemoteAddr
}

// resource names what a request acts on: its path's parameters.
func resource(r *http.Request) string {
	var parts []string
	for _, k := range []string{"ref", "sandbox", "id", "name", "sid", "port"} {
		if v := r.PathValue(k); v != "" {
			parts = append(parts, k+"="+audit.Clip(v))
		}
	}
	return strings.Join(parts, " ")
}

// auditRequest records one API request: who, which route, on what (and the id of the
// sandbox it resolved or made, if any), with what result.
// An unauthenticated request's path is the caller's choice: the edge clips it.
func (s *Server) auditRequest(r *http.Request, action, sandbox string, status int, err error, start time.Time) {
	e := audit.Entry{Identity: owner(r), Action: action, Sandbox: sandbox, Resource: resource(r), Source: source(r)}
	s.requestAudit().Record(r, e, status, err, start)
}

func (s *Server) requestAudit() httpedge.RequestAudit {
	return httpedge.RequestAudit{Log: s.opts.AuditLog, Logger: s.log}
}

func toAPIAudit(rec *audit.LogRecord) api.AuditRecord {
	return api.AuditRecord{Seq: rec.Seq, Record: rec.Doc, Hash: rec.Hash}
}

// auditList lists audit records: an administrator's all, anyone else's only its own.
func (s *Server) auditList(w http.ResponseWriter, r *http.Request) error {
	if s.opts.AuditLog == nil {
		return errdefs.Unavailable("this node keeps no audit log")
	}
	q := r.URL.Query()
	f := audit.LogFilter{Identity: q.Get("identity"), Action: q.Get("action"), Sandbox: q.Get("sandbox")}
	if !isAdmin(r) {
		if f.Identity != "" && f.Identity != owner(r) {
			return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "only an administrator reads other identities' audit records"}
		}
		f.Identity = owner(r)
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return errdefs.Invalid("invalid since %q: an RFC 3339 time such as 2026-12-01T00:00:00Z", v)
		}
		f.Since = t
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errdefs.Invalid("invalid after %q: a record sequence number", v)
		}
		f.After = n
	}
	recs, err := s.opts.AuditLog.List(r.Context(), f)
	if err != nil {
		return err
	}
	out := api.AuditList{Records: []api.AuditRecord{}}
	for _, rec := range recs {
		out.Records = append(out.Records, toAPIAudit(rec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// auditVerify checks the whole chain.
func (s *Server) auditVerify(w http.ResponseWriter, r *http.Request) error {
	if s.opts.AuditLog == nil {
		return errdefs.Unavailable("this node keeps no audit log")
	}
	res, err := s.opts.AuditLog.Verify(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AuditVerify{Records: res.Records, OK: res.OK, Seq: res.Seq, Problem: res.Problem})
	return nil
}
