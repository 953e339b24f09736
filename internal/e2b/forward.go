package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
)

// On a node of a cluster, a call of either plane about a sandbox another node holds is
// proxied to that node's plane (forward.Forwarder, over the node listener, marked
// forward.PlaneE2B), as Airlock's own API's are:
//
//   - A control-plane call on /sandboxes/{id}/… goes once this node has authenticated
//     the API key and checked the permission, as the key's id (forward.Caller); the
//     key itself stays here. The other node derives the caller again from the shared
//     store (the key must still be valid there), answers, and records the call. A
//     template delete (a snapshot) goes to the node that took the snapshot, as on
//     Airlock's API.
//   - A create (POST /sandboxes) asks Options.Place for its node, as Airlock's API's
//     does, and when it names another node goes there as the key's id: that node
//     makes it, as a forwarded call. The chosen node's own refusal (unavailable,
//     draining, full) is retried once on the next node Place names
//     (forward.PlaceCreate). A create from a snapshot is a fork, made here.
//   - An in-sandbox (envd) call, or a port's traffic, goes once its access token is
//     checked here; the token goes with it (and the Authorization header, which names
//     the user the call acts as), and the other node checks it again with the
//     cluster's shared token key (cluster.keys_dir). The sandbox is named to it by the
//     E2b-Sandbox-Id and E2b-Sandbox-Port headers, whatever named it here.
//
// A forwarded call is never forwarded again, and the forwarding headers are honoured
// only on the node listener (ServeCluster), from a verified cluster node.

type forwardedKey struct{}

// proxiedKey carries a *bool a handler sets once it proxied the call to another node,
// whose record of the call is then the only one.
type proxiedKey struct{}

// ServeCluster serves the calls the cluster's other nodes forwarded to this node's
// E2B-compatible plane, on the node listener: the connection's client certificate
// must be the cluster CA's (Options.ClusterTLS).
func (c *Control) ServeCluster(w http.ResponseWriter, r *http.Request) {
	node, err := forward.VerifiedPeer(c.opts.ClusterTLS, r)
	if err != nil {
		c.writeError(w, r, err)
		return
	}
	caller, err := forward.ParseCaller(r.Header.Get(forward.Header))
	if err != nil {
		c.writeError(w, r, errdefs.Invalid("a call on the node listener must carry a valid %s header", forward.Header))
		return
	}
	ctx := context.WithValue(forward.Via(r.Context(), node), forwardedKey{}, caller)
	c.ServeHTTP(w, r.WithContext(ctx))
}

// forwarded is the caller of a call forwarded here, and whether it was.
func forwarded(r *http.Request) (forward.Caller, bool) {
	caller, ok := r.Context().Value(forwardedKey{}).(forward.Caller)
	return caller, ok && forward.From(r.Context()) != ""
}

// forwardedPrincipal is the caller of a control-plane call forwarded here, derived
// again from the shared store by the API key's id.
func (c *Control) forwardedPrincipal(r *http.Request, caller forward.Caller) (*auth.Principal, error) {
	if caller.Identity == "" || caller.TokenID == "" {
		return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "a forwarded call must name its caller's identity and API key"}
	}
	if c.opts.Auth == nil {
		return nil, errdefs.Unavailable("this control plane has no authentication")
	}
	return c.opts.Auth.TokenPrincipal(r.Context(), caller.Identity, caller.TokenID)
}

// source is where a call reached this plane, for its audit record.
func source(r *http.Request) string {
	if caller, ok := forwarded(r); ok {
		return "node " + forward.From(r.Context()) + " (forwarded; there: " + caller.Source + ")"
	}
	return "e2b tcp " + r.RemoteAddr
}

// forwarding says whether calls may go to other nodes from here: on a node of a
// cluster, for a call that reached it first.
func (c *Control) forwarding(r *http.Request) bool {
	return c.opts.Forward != nil && forward.From(r.Context()) == ""
}

// holder is the node that must answer a control-plane call about a sandbox or a
// snapshot, when that is another node ("": this one answers). fallback says this node
// may answer still when that node cannot be reached (a snapshot in the shared object
// store). It reads the store only on a node of a cluster.
func (c *Control) holder(r *http.Request, p *auth.Principal) (node string, fallback bool) {
	id := r.PathValue("id")
	if !c.forwarding(r) || id == "" {
		return "", false
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/sandboxes/") || strings.HasPrefix(r.URL.Path, "/v2/sandboxes/"):
		if !strings.HasPrefix(id, "sb_") {
			return "", false
		}
		sb, err := c.m.Resolve(r.Context(), p.Identity, id)
		if err != nil || sb.Node == "" || sb.Node == c.m.NodeName() {
			return "", false
		}
		return sb.Node, false
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/templates/") && strings.HasPrefix(id, "snap_"):
		node, shared, err := c.m.SnapshotNode(r.Context(), p.Identity, id)
		if err != nil {
			return "", false
		}
		return node, shared
	}
	return "", false
}

// forwardControl proxies a control-plane call to node, as p. done says it was
// answered (by node, or by the refusal that it cannot be reached).
func (c *Control) forwardControl(w http.ResponseWriter, r *http.Request, p *auth.Principal, node string, fallback bool) (done bool, err error) {
	r.Header.Del("X-API-Key") // the caller goes as the forwarding header says
	err = c.opts.Forward.Proxy(w, r, forward.Call{Node: node, Plane: forward.PlaneE2B,
		Caller: forward.Caller{Identity: p.Identity, TokenID: p.TokenID, Source: source(r)}})
	if err != nil && fallback && errors.Is(err, errdefs.ErrUnavailable) {
		c.log.Warn("the node that took a snapshot cannot be reached; deleting it from the object store here", "node", node, "err", err)
		return false, nil
	}
	return true, err
}

// forwardSandbox proxies an in-sandbox call whose token was checked here to node,
// which holds the sandbox id; its token goes with it.
func (c *Control) forwardSandbox(w http.ResponseWriter, r *http.Request, node, id, owner, keyID string, port int) error {
	r.Header.Set(hdrSandboxID, id)
	r.Header.Set(hdrSandboxPort, strconv.Itoa(port))
	return c.opts.Forward.Proxy(w, r, forward.Call{Node: node, Plane: forward.PlaneE2B, KeepAuthorization: true,
		Caller: forward.Caller{Identity: owner, TokenID: keyID, Source: source(r)}})
}

// placing says whether a create asks Place for its node: on a node of a cluster with a
// placement, for a create that reached it first (a forwarded create is this node's).
func (c *Control) placing(r *http.Request) bool {
	return c.opts.Place != nil && c.forwarding(r)
}

// placeCreate asks Place where req goes, and sends the create to the node it names
// when that is another, as p (forward.PlaceCreate). done says the call was answered.
func (c *Control) placeCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, raw []byte, req newSandbox) (done bool, err error) {
	pr := forward.PlaceRequest{Labels: req.Metadata}
	if req.TemplateID != BaseTemplate {
		pr.Image = req.TemplateID
	}
	r.Header.Del("X-API-Key") // the caller goes as the forwarding header says
	var answered bool         // the last node sent to answered, and records the call
	done, err = forward.PlaceCreate(w, r, raw, c.opts.Place, pr, c.m.NodeName(), func(call forward.Call) error {
		call.Plane = forward.PlaneE2B
		call.Caller = forward.Caller{Identity: p.Identity, TokenID: p.TokenID, Source: source(r)}
		err := c.opts.Forward.Proxy(w, r, call)
		answered = err == nil || errors.As(err, new(*forward.Declined))
		return err
	})
	if proxied, ok := r.Context().Value(proxiedKey{}).(*bool); ok && done && answered {
		*proxied = true
	}
	return done, err
}
