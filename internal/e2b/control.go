// Package e2b owns Airlock's E2B-compatible control plane: the HTTP API that E2B's SDKs
// call to create, list, pause, resume, fork, snapshot and kill sandboxes (point them at
// it with E2B_API_URL). It maps each E2B call onto manager calls — a template is an
// Airlock image, the timeout is the sandbox's maximum lifetime, metadata are labels,
// pause is suspend, resume and connect are resume, autoPause is idle suspension, network
// is the egress policy (network.go), kill is terminate, fork is fork, a
// snapshot is a snapshot and a template to create from (snapshots.go) — and answers in
// E2B's shapes, errors included ({"code": <HTTP status>, "message": "..."}). What Airlock
// cannot do the E2B way is refused with a message saying what Airlock does instead:
// a known E2B call that Airlock does not serve answers 501, any other path 404.
// The same listener serves the in-sandbox (envd) plane: see envd.go.
//
// Hostile surfaces it guards: every request carries an API key (X-API-Key) that the
// caller's authenticator turns into an identity, and that identity's permissions are
// checked as on Airlock's own API; a sandbox id resolves only among the caller's own
// sandboxes (another identity's is "not found"); bodies are capped at 1 MiB and bad
// input is refused before anything changes.
//
// It holds no sandbox rules (those are the manager's) and must not import the server,
// the store, the runtime or the agent: it reaches a sandbox's processes and files
// through the manager (manager.Work), as the native API does.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/httpstatus"
	"github.com/airlockhq/airlock/internal/jsonbody"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/portproxy"
)

// ClientID is what the control plane reports as every sandbox's (deprecated) clientID.
const ClientID = "airlock"

// EnvdVersion is the envd version reported for every sandbox. E2B's SDKs choose what
// they send by it: from 0.4.0 a call without a user is the sandbox's default user's,
// from 0.5.2 stdin can be closed, from 0.5.7 uploads may be a plain byte stream; from
// 0.6.2 on they would send file metadata, which Airlock does not keep, so the SDKs
// refuse that themselves.
const EnvdVersion = "0.5.7"

// Options configure the control plane.
type Options struct {
	// Auth authenticates API keys, and checks the key behind a sandbox's access token
	// again on each of the in-sandbox plane's requests (auth.Service).
	Auth Authenticator
	// Domain, if set, is reported as every sandbox's domain.
	Domain string
	// Log receives the causes of internal errors (default: slog.Default()).
	Log *slog.Logger
	// AuditLog, if set, records every request as Airlock's own API does (action
	// "E2B <route>"), and while it cannot be written calls that change anything are
	// refused.
	AuditLog *audit.Chain
	// TokenKey is the node's key for the sandboxes' envd and traffic access tokens;
	// without it the in-sandbox plane refuses every request. Keep it across restarts,
	// or the tokens the SDKs hold stop working.
	TokenKey []byte
	// Ports forwards the sandboxes' ports' traffic (nil: a proxy of the plane's own).
	// Share the node's, so that closing a port cuts these connections too.
	Ports *portproxy.Proxy
	// Forward, on a node of a cluster, proxies calls about other nodes' sandboxes to
	// their planes (nil: every call is answered here); see forward.go.
	Forward *forward.Forwarder
	// Place, if set with Forward, chooses the node of each new sandbox, as for
	// Airlock's own API (nil: here); see forward.go.
	Place forward.Place
	// ClusterTLS checks the callers of ServeCluster: the cluster's nodes.
	ClusterTLS forward.ClusterTLS
}

// Authenticator is what the planes need of the node's identities.
type Authenticator interface {
	// Authenticate returns the identity an API key (the X-API-Key header) stands for,
	// with the key's id.
	Authenticate(ctx context.Context, apiKey string) (*auth.Principal, error)
	// TokenPrincipal is identity's principal while its API key keyID is valid.
	TokenPrincipal(ctx context.Context, identity, keyID string) (*auth.Principal, error)
	// LiveTokens lists the ids of identity's valid API keys.
	LiveTokens(ctx context.Context, identity string) ([]string, error)
}

// Control is the E2B-compatible control plane.
type Control struct {
	m     *manager.Manager
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	envd  *http.ServeMux
	ports *portproxy.Proxy
	fs    *filesystemService
}

// handler writes its answer, or returns the error that refuses the request.
type handler func(w http.ResponseWriter, r *http.Request, p *auth.Principal) error

// NewControl builds the control plane over m.
func NewControl(m *manager.Manager, opts Options) *Control {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	c := &Control{m: m, opts: opts, log: log.With("component", "e2b"), mux: http.NewServeMux(), ports: opts.Ports}
	if c.ports == nil {
		c.ports = portproxy.New()
	}
	for _, rt := range []struct {
		pattern string
		perm    auth.Permission
		h       handler
	}{
		{"POST /sandboxes", auth.SandboxCreate, c.create},
		{"POST /v2/sandboxes", auth.SandboxCreate, c.create},
		{"GET /sandboxes", auth.SandboxRead, c.listV1},
		{"GET /v2/sandboxes", auth.SandboxRead, c.listV2},
		{"GET /sandboxes/{id}", auth.SandboxRead, c.get},
		{"GET /sandboxes/{id}/metrics", auth.SandboxRead, c.metrics},
		{"GET /sandboxes/metrics", auth.SandboxRead, c.manyMetrics},
		{"DELETE /sandboxes/{id}", auth.SandboxCreate, c.kill},
		{"POST /sandboxes/{id}/timeout", auth.SandboxCreate, c.setTimeout},
		{"PUT /sandboxes/{id}/network", auth.SandboxNetwork, c.updateNetwork},
		{"POST /sandboxes/{id}/pause", auth.SandboxCreate, c.pause},
		{"POST /sandboxes/{id}/resume", auth.SandboxCreate, c.resume},
		{"POST /sandboxes/{id}/connect", auth.SandboxCreate, c.connect},
		{"POST /v2/sandboxes/{id}/connect", auth.SandboxCreate, c.connect},
		{"POST /sandboxes/{id}/fork", auth.SandboxCreate, c.fork},
		{"POST /sandboxes/{id}/snapshots", auth.SnapshotCreate, c.createSnapshot},
		{"GET /snapshots", auth.SnapshotRead, c.listSnapshots},
		{"DELETE /templates/{id}", "", c.deleteTemplate}, // a snapshot's needs snapshot.delete
	} {
		c.mux.HandleFunc(rt.pattern, c.adapt(rt.pattern, rt.perm, rt.h))
	}
	for _, ns := range notServed {
		for _, pattern := range ns.patterns {
			c.mux.HandleFunc(pattern, c.adapt(pattern, "", func(w http.ResponseWriter, r *http.Request, _ *auth.Principal) error {
				return &errdefs.Error{Class: errNotServed, Msg: fmt.Sprintf("%s %s is not served by Airlock: %s", r.Method, r.URL.Path, ns.instead)}
			}))
		}
	}
	c.mux.HandleFunc("/", c.adapt("", "", func(w http.ResponseWriter, r *http.Request, _ *auth.Principal) error {
		return errdefs.NotFound("%s %s is not part of Airlock's E2B-compatible control plane (see docs/e2b.md for what is)", r.Method, r.URL.Path)
	}))
	c.fs = &filesystemService{c: c}
	c.envd = c.envdMux()
	return c
}

// Close ends the polled file watchers and waits for them; call it once the listener
// has stopped serving.
func (c *Control) Close() { c.fs.watchers.close() }

// notServed are E2B's calls that Airlock does not serve, each with what Airlock does
// instead. They answer 501, not 404: the SDKs read a 404 as "sandbox not found".
var notServed = []struct {
	patterns []string
	instead  string
}{
	{[]string{"/sandboxes/{id}/logs", "/v2/sandboxes/{id}/logs"},
		"sandbox logs are not kept; Airlock's API shows a sandbox's events (airlock events) and a background process's output (airlock logs), and commands.run streams a command's output"},
	{[]string{"/sandboxes/{id}/refreshes"},
		"extend a sandbox's lifetime with setTimeout (POST /sandboxes/{id}/timeout)"},
	{[]string{"/templates", "/templates/", "/v2/templates", "/v2/templates/", "/v3/templates", "/v3/templates/"},
		"templates are Airlock images: import or pull one with Airlock's API (airlock image import, airlock image pull) and give its name as templateID; a snapshot id (snap_…) is a template too"},
	{[]string{"/volumes", "/volumes/", "/volumecontent", "/volumecontent/"},
		"Airlock's volumes are made and managed with its own API (airlock volume create, POST /v1/volumes), not this one; a sandbox created here attaches them with volumeMounts [{name, path}]"},
	{[]string{"/secrets", "/secrets/"},
		"hand a sandbox secrets with Airlock's secret brokering (airlock secret create, airlock secret bind)"},
	{[]string{"/teams", "/teams/"},
		"Airlock has identities and roles, not teams (airlock user, airlock role)"},
	{[]string{"/nodes", "/nodes/"},
		"Airlock's daemon reports on its node itself (airlock status)"},
	{[]string{"/access-tokens", "/access-tokens/", "/api-keys", "/api-keys/"},
		"an administrator makes API keys with Airlock's API (airlock token create --user NAME --format e2b)"},
}

// ServeHTTP sends a request that names a sandbox to the in-sandbox plane and any other
// to the control plane.
func (c *Control) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, ok, err := c.sandboxAddr(r)
	switch {
	case err != nil:
		c.writeError(w, r, err)
	case ok:
		c.serveSandbox(w, r, id, port)
	default:
		c.mux.ServeHTTP(w, r)
	}
}

// adapt authenticates the caller, checks perm ("" for any authenticated caller) and is
// the one place a handler's error becomes E2B's error shape.
func (c *Control) adapt(pattern string, perm auth.Permission, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, noted := manager.NoteSandbox(r.Context())
		r = r.WithContext(ctx)
		var p *auth.Principal
		var proxied bool // another node answered, and records the call
		status, err := httpedge.Run(w, r, c.writeError, func(w http.ResponseWriter, r *http.Request) (err error) {
			if caller, ok := forwarded(r); ok {
				p, err = c.forwardedPrincipal(r, caller)
			} else {
				p, err = c.authenticate(r)
			}
			if err != nil {
				return err
			}
			if perm != "" {
				if err := permit(p, perm); err != nil {
					return err
				}
			}
			if err := c.requestAudit().Ready(r.Method != http.MethodGet); err != nil {
				return err
			}
			if node, fallback := c.holder(r, p); node != "" {
				if done, err := c.forwardControl(w, r, p, node, fallback); done {
					proxied = err == nil
					return err
				}
			}
			ctx := context.WithValue(manager.WithActor(r.Context(), p.Identity), proxiedKey{}, &proxied)
			return h(w, r.WithContext(ctx), p)
		})
		if !proxied {
			c.audit(r, pattern, p, noted(), status, err, start)
		}
	}
}

// permit refuses a caller that does not hold perm.
func permit(p *auth.Principal, perm auth.Permission) error {
	if p.Can(perm) {
		return nil
	}
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied,
		Msg: fmt.Sprintf("this call needs the %s permission, which the roles of %q (%s) do not grant", perm, p.Identity, strings.Join(p.Roles, ", "))}
}

// audit records the request in the audit log, as Airlock's own API records its own.
func (c *Control) audit(r *http.Request, pattern string, p *auth.Principal, sandbox string, status int, err error, start time.Time) {
	if pattern == "" {
		pattern = r.Method + " " + r.URL.Path // the caller's choice: the edge clips it
	}
	e := audit.Entry{Action: "E2B " + pattern, Sandbox: sandbox, Source: source(r)}
	if errors.Is(err, errNotServed) {
		e.Result = strconv.Itoa(status) + " not_implemented"
	}
	if p != nil {
		e.Identity = p.Identity
	}
	if id := r.PathValue("id"); id != "" {
		e.Resource = audit.Clip("id=" + id)
	}
	c.requestAudit().Record(r, e, status, err, start)
}

func (c *Control) requestAudit() httpedge.RequestAudit {
	return httpedge.RequestAudit{Log: c.opts.AuditLog, Logger: c.log}
}

func (c *Control) authenticate(r *http.Request) (*auth.Principal, error) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated,
			Msg: "an API key is required in the X-API-Key header (an administrator makes one: airlock token create --user NAME --format e2b)"}
	}
	if c.opts.Auth == nil {
		return nil, errdefs.Unavailable("this control plane has no authentication")
	}
	p, err := c.opts.Auth.Authenticate(r.Context(), key)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnauthenticated) {
			return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "the API key is not valid (wrong, expired or revoked)"}
		}
		return nil, err
	}
	return p, nil
}

// apiError is E2B's error shape.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// errNotServed is the class of an E2B call that Airlock does not serve (501).
var errNotServed = errors.New("not implemented")

// statusOf is the one place an error becomes an error code and an HTTP status.
func statusOf(err error) (code string, status int) {
	if errors.Is(err, errNotServed) {
		return "not_implemented", http.StatusNotImplemented
	}
	return errdefs.Code(err), httpstatus.Status(err)
}

// toAPIError is err in E2B's error shape; the cause of an internal error goes to the
// log, not to the caller.
func (c *Control) toAPIError(r *http.Request, err error) apiError {
	code, status := statusOf(err)
	msg := errdefs.Message(err)
	if code == "internal" {
		msg = c.internal("request failed", err, "method", r.Method, "path", r.URL.Path)
	}
	return apiError{Code: status, Message: msg}
}

// internal logs an internal failure's cause under a new request id, and returns what
// the caller hears of it: that id, which E2B's error shape carries in its message.
func (c *Control) internal(what string, err error, args ...any) string {
	return errdefs.InternalMessage("request", httpedge.LogInternal(c.log, what, err, args...))
}

func (c *Control) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := c.toAPIError(r, err)
	if _, ok := forwarded(r); ok {
		// E2B's error shape has no details: the node that forwarded the call reads
		// which node the refusal is about (a placed create's, from this header).
		if node, _ := errdefs.Details(err)["node"].(string); node != "" {
			w.Header().Set(forward.RefusingNodeHeader, node)
		}
	}
	writeJSON(w, e.Code, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpedge.WriteJSON(w, status, v) }

// decode reads a JSON body of at most jsonbody.MaxBytes. Fields this plane does not
// know are ignored (E2B's SDKs add fields over time); an empty body is allowed when
// optional, and leaves v as it was.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return jsonbody.Decode(w, r, v, jsonbody.Options{AllowUnknown: true, Optional: optional})
}
