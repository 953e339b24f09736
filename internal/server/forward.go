package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
)

// A cluster's nodes each serve the whole API. A call about a sandbox another node holds
// is proxied to that node (forward.Forwarder) once this node has authenticated and
// authorized it, with the caller in the forwarding header; that node takes it on its
// node listener (ServeCluster), where only a verified cluster node's certificate is
// accepted, derives the caller again from the shared store, answers, and writes the
// call's audit record naming the node it came through. A forwarded call is never
// forwarded again: one hop, no loops. The forwarding header is refused on every other
// listener.

// forwardedKey carries the caller of a call that came through the node listener.
type forwardedKey struct{}

// proxiedKey carries a *bool an edge sets once it proxied the call to another node,
// whose record of the call is then the only one.
type proxiedKey struct{}

// ServeCluster serves the node listener: calls the cluster's other nodes forwarded
// here, on a connection whose client certificate the cluster's CA verified (the
// listener's tls.Config requires one). The caller is the forwarding header's, derived
// again from the shared store.
func (s *Server) ServeCluster(w http.ResponseWriter, r *http.Request) {
	node, err := s.peerNode(r)
	if err != nil {
		s.writeError(w, r, err)
		s.log.Warn("refused a call on the node listener", "remote", r.RemoteAddr, "err", err)
		return
	}
	ctx := forward.Via(r.Context(), node)
	if strings.HasPrefix(r.URL.Path, "/v1/ports/") {
		s.mux.ServeHTTP(w, r.WithContext(ctx)) // exposed ports carry their own token
		return
	}
	c, err := forward.ParseCaller(r.Header.Get(forward.Header))
	if err != nil || r.Header.Get(forward.Header) == "" {
		s.writeError(w, r, errdefs.Invalid("a call on the node listener must carry a valid %s header", forward.Header))
		return
	}
	r = r.WithContext(context.WithValue(ctx, forwardedKey{}, c))
	p, err := s.opts.Auth.Forwarded(r.Context(), c.Identity, c.TokenID, c.Sandbox, c.Roles)
	if err != nil {
		s.writeError(w, r, err)
		s.auditRequest(r, r.Method+" "+r.URL.Path, "", http.StatusUnauthorized, err, time.Now())
		return
	}
	s.serveAs(w, r, p)
}

// peerNode is the cluster node a node listener's request came from.
func (s *Server) peerNode(r *http.Request) (string, error) {
	return forward.VerifiedPeer(s.opts.ClusterTLS, r)
}

// refuseForwarding refuses the forwarding header on a listener other than the node
// listener: only a cluster node may say who a call is for.
func refuseForwarding(r *http.Request) error {
	if _, ok := r.Header[http.CanonicalHeaderKey(forward.Header)]; !ok {
		return nil
	}
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied,
		Msg: "the " + forward.Header + " header is accepted only from the cluster's nodes, on the node listener"}
}

// forwardCall proxies a call about the sandbox {ref} to the node that holds it, when
// that is another node: the record's node, one store read (none on a node that is in
// no cluster, or for a call that was forwarded here). done says the call was answered.
func (s *Server) forwardCall(w http.ResponseWriter, r *http.Request, rt route) (done bool, err error) {
	if s.opts.Forward == nil || forward.From(r.Context()) != "" {
		return false, nil
	}
	switch rt.inside {
	case ownSandbox:
	case ownSnapshot:
		return s.forwardSnapshot(w, r)
	default:
		return false, nil
	}
	ref := r.PathValue("ref")
	if ref == "" {
		return false, nil
	}
	node, err := s.m.NodeOf(r.Context(), s.scope(r), ref, rt.pattern == resumeRoute)
	if err != nil || node == "" || node == s.m.NodeName() {
		return false, nil // the handler answers, its refusal included
	}
	return true, s.proxy(w, r, forward.Call{Node: node})
}

// forwardSnapshot sends a call about the snapshot {id} to the node that took it, when
// that node must answer: every call, when snapshots stay on the node that took them (no
// shared object store); a delete in any case, since that node holds the snapshot's
// local copy and counts its chunks, unless it cannot be reached and the object store
// holds the snapshot (then this node deletes it there). With a shared object store, a
// read or a fork is answered here (a fork is made here). done says the call was
// answered.
func (s *Server) forwardSnapshot(w http.ResponseWriter, r *http.Request) (done bool, err error) {
	node, shared, err := s.m.SnapshotNode(r.Context(), owner(r), r.PathValue("id"))
	if err != nil || node == "" || (shared && r.Method != http.MethodDelete) {
		return false, nil // the handler answers, its refusal included
	}
	err = s.proxy(w, r, forward.Call{Node: node})
	if err != nil && shared && errors.Is(err, errdefs.ErrUnavailable) {
		s.log.Warn("the node that took a snapshot cannot be reached; deleting it from the object store here",
			"snapshot", r.PathValue("id"), "node", node, "err", err)
		return false, nil
	}
	return true, err
}

// forwardPort sends an exposed port's request to the node that holds its sandbox,
// when OpenPort refused it as another node's (the port's token was checked first, so
// that only a caller the port admits learns where it is). done says it was answered.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request, err error) (done bool, _ error) {
	node := otherNode(err)
	if node == "" || s.opts.Forward == nil || forward.From(r.Context()) != "" {
		return false, err
	}
	// The port's own token goes with the request; the node that holds the sandbox
	// checks it again.
	return true, s.opts.Forward.Proxy(w, r, forward.Call{Node: node})
}

// otherNode is the node a refusal of another node's sandbox names ("": err is none).
func otherNode(err error) string {
	if err == nil || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return ""
	}
	d := errdefs.Details(err)
	if d["reason"] != "other_node" {
		return ""
	}
	node, _ := d["node"].(string)
	return node
}

// proxy sends the call to c.Node as the request's caller.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, c forward.Call) error {
	c.Caller = callerOf(r)
	err := s.opts.Forward.Proxy(w, r, c)
	var d *forward.Declined
	if err == nil || errors.As(err, &d) {
		if p, ok := r.Context().Value(proxiedKey{}).(*bool); ok {
			*p = true
		}
	}
	return err
}

// callerOf is the request's caller as the forwarding header carries it.
func callerOf(r *http.Request) forward.Caller {
	p := principal(r)
	c := forward.Caller{Identity: p.Identity, TokenID: p.TokenID, Sandbox: p.Sandbox, Source: source(r)}
	if p.Sandbox != "" {
		c.Roles = p.Roles
	}
	return c
}

// placing says whether a create asks Place for its node: on a node of a cluster with a
// placement, for a create that reached it first (a forwarded create is this node's).
func (s *Server) placing(r *http.Request) bool {
	return s.opts.Place != nil && s.opts.Forward != nil && forward.From(r.Context()) == ""
}

// placeCreate asks Place where req goes, and sends the create to the node it names
// when that is another (forward.PlaceCreate). done says the call was answered.
func (s *Server) placeCreate(w http.ResponseWriter, r *http.Request, raw []byte, req api.CreateSandboxRequest) (done bool, err error) {
	pr := forward.PlaceRequest{Memory: req.Limits.Memory, CPUs: req.Limits.CPU, Runtime: req.Runtime, Image: req.Image, Labels: req.Labels,
		NodeSelector: req.NodeSelector}
	done, err = forward.PlaceCreate(w, r, raw, s.opts.Place, pr, s.m.NodeName(), func(c forward.Call) error { return s.proxy(w, r, c) })
	if !done {
		// Declined elsewhere and made here after all: this node answers, and its audit
		// record is the call's (the decline marked the call answered elsewhere).
		if p, ok := r.Context().Value(proxiedKey{}).(*bool); ok {
			*p = false
		}
	}
	return done, err
}
