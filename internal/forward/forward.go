// Package forward carries an API call about a sandbox on another node of the cluster to
// that node, over mutual TLS, so that a client never needs to know which node it
// reached. It owns the forwarding header's wire form, the peers' addresses (read from
// the membership list, cached briefly) and the proxy: one hop, the body streamed through
// unread, upgrades (PTYs) passed through, every answer flushed as it comes.
//
// It decides nothing about who may call what: the edge that forwards has authorized the
// call, and the node that answers re-derives the caller from the shared store. It never
// dials an address a caller names: only a node's own advertised address, from the
// store's membership rows, with that node's client configuration (its name checked in
// the certificate).
package forward

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// ClusterTLS is the cluster's certificate authority as a node holds it: its own
// certificate, the CA every node's is checked against, and the node names they carry.
type ClusterTLS interface {
	// ServerConfig is the node listener's configuration: it requires and verifies a
	// client certificate of the cluster's CA.
	ServerConfig() *tls.Config
	// ClientConfig is the configuration for dialing node: it presents this node's
	// certificate and accepts only node's.
	ClientConfig(node string) *tls.Config
	// PeerNode is the name of the cluster node a verified connection's peer is, or an
	// error when its certificate names none.
	PeerNode(*tls.ConnectionState) (string, error)
}

// Header carries the caller of a forwarded call, from the node that forwards it to the
// node that answers; it is accepted only on the node listener, from a verified cluster
// node, and refused everywhere else.
const Header = "Airlock-Forwarded-For"

// PlaneHeader names the plane a forwarded call is for, on the node listener: absent for
// Airlock's own API, PlaneE2B for the E2B-compatible plane.
const PlaneHeader = "Airlock-Forwarded-Plane"

// RefusingNodeHeader names, on a forwarded call's refusal whose body cannot say it
// (the E2B plane's error shape), the node the refusal is about (details.node on
// Airlock's API); DeclineForCapacity reads either.
const RefusingNodeHeader = "Airlock-Refusing-Node"

// PlaneE2B is PlaneHeader's value for the E2B-compatible plane.
const PlaneE2B = "e2b"

// VerifiedPeer is the cluster node a request on the node listener came from: its
// connection's client certificate, which the listener's TLS verified, must be one of
// the cluster's CA that names a node.
func VerifiedPeer(ct ClusterTLS, r *http.Request) (string, error) {
	deny := &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "the node listener serves only the cluster's nodes, with a certificate of the cluster's CA"}
	if ct == nil || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return "", deny
	}
	node, err := ct.PeerNode(r.TLS)
	if err != nil || node == "" {
		return "", deny
	}
	return node, nil
}

// Caller is who made a forwarded call, as the forwarding node authenticated it. The
// answering node derives the principal again from the shared store: by the token id
// when there is one (a revoked token stops working there too), else by the identity's
// roles (a unix socket's user), narrowed to Roles for a sandbox's session credential.
type Caller struct {
	Identity string
	TokenID  string
	// Sandbox is the sandbox whose code made the call with its session credential, and
	// Roles the roles that credential acts with.
	Sandbox string
	Roles   []string
	// Source is where the call reached the forwarding node (its audit source there).
	Source string
}

// Encode is c in the header's form: URL query encoding.
func (c Caller) Encode() string {
	v := url.Values{}
	v.Set("identity", c.Identity)
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("token", c.TokenID)
	set("sandbox", c.Sandbox)
	set("roles", strings.Join(c.Roles, ","))
	set("source", c.Source)
	return v.Encode()
}

// ParseCaller reads the header's form.
func ParseCaller(s string) (Caller, error) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return Caller{}, err
	}
	c := Caller{Identity: v.Get("identity"), TokenID: v.Get("token"), Sandbox: v.Get("sandbox"), Source: v.Get("source")}
	if r := v.Get("roles"); r != "" {
		c.Roles = strings.Split(r, ",")
	}
	return c, nil
}

type ctxKey struct{}

// Via is the request context of a call that came through the node listener from the
// cluster node named node.
func Via(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, ctxKey{}, node)
}

// From is the cluster node a call was forwarded from ("": none, it reached this node
// first). A forwarded call is never forwarded again.
func From(ctx context.Context) string {
	n, _ := ctx.Value(ctxKey{}).(string)
	return n
}

// PlaceRequest is what a placement reads to choose the node of a new sandbox.
type PlaceRequest struct {
	// Memory (bytes) and CPUs the sandbox asks for (0: the node's default).
	Memory int64
	CPUs   float64
	// Runtime asked for ("": the default) and the image it starts from.
	Runtime, Image string
	// Labels are the sandbox's labels; NodeSelector the labels its node must carry.
	Labels, NodeSelector map[string]string
	// Exclude lists the nodes that already declined this create (draining, full, gone):
	// the placement names another, or fails.
	Exclude []string
}

// Place chooses the node a new sandbox is created on (its name; "" or this node's
// name: here). Its error is the create's.
type Place func(ctx context.Context, req PlaceRequest) (node string, err error)
