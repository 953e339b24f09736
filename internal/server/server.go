// Package server owns Airlock's HTTP edge: routing, authentication, request decoding,
// response and error encoding, and streaming. Handlers decode, authorize, call the
// manager and encode; they hold no sandbox rules and never touch the store, the runtime
// or the host directly.
//
// Hostile surfaces it guards: a request names only the caller's own resources (the
// manager resolves them in the caller's scope); host facts in /v1/status are for the
// unix socket's users (administrators) only; output a sandbox writes into a non-streamed
// exec or send is buffered only up to a per-call encoded size and a daemon-wide budget.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/httpstatus"
	"github.com/airlockhq/airlock/internal/jsonbody"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/portproxy"
	"github.com/airlockhq/airlock/internal/secret"
)

// Options configure the server.
type Options struct {
	// Auth says who each caller is and what it may do.
	Auth *auth.Service
	// AuditLog, if set, records every API request; while it cannot be written,
	// mutating calls are refused.
	AuditLog *audit.Chain
	// Secrets keeps the owners' secrets (nil: none on this node).
	Secrets *secret.Service
	// Version is reported by /v1/status.
	Version string
	// StateDir is reported by /v1/status and holds image uploads in progress.
	StateDir string
	// PublicURL is the base of exposed ports' URLs (the TCP listener), e.g.
	// "http://203.0.113.5:7070".
	PublicURL string
	// OutputLimit bounds, per stream, the encoded size of the output a non-streamed exec
	// or send returns (0: DefaultOutputLimit); the rest is dropped and counted.
	OutputLimit int64
	// OutputBudget bounds the output all non-streamed calls buffer at once (0:
	// DefaultOutputBudget); a call that finds it spent keeps less.
	OutputBudget int64
	// Ports forwards exposed ports' traffic (nil: a proxy of the server's own). Share
	// one with the node's other planes so that closing a port cuts their connections
	// too.
	Ports *portproxy.Proxy
	// Forward, on a node of a cluster, proxies calls about other nodes' sandboxes to
	// them (nil: every call is answered here, as on a node alone).
	Forward *forward.Forwarder
	// ClusterTLS checks the node listener's callers (ServeCluster): the cluster's nodes.
	ClusterTLS forward.ClusterTLS
	// Place, if set with Forward, chooses the node of each new sandbox (nil: here).
	Place forward.Place
	// Metrics serves GET /metrics, the node's Prometheus series (nil: not served).
	Metrics http.Handler
}

// Server is the HTTP API.
type Server struct {
	m    *manager.Manager
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	ports     *portproxy.Proxy
	outBudget *outputBudget
	// readAudits is held shared by each read from its answer until its audit record
	// is written; a mutating call waits for those before it checks that the log can be
	// written, so a read's failed record still stops the next change.
	readAudits sync.RWMutex
	listed     encodedSandboxes
}

type ctxKey int

const (
	principalKey ctxKey = iota
	peerKey             // the unix socket peer's uid
	sandboxKey          // the sandbox a request came from, through the egress proxy
)

// New builds the server and its routes.
func New(m *manager.Manager, opts Options, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	if opts.OutputLimit <= 0 {
		opts.OutputLimit = DefaultOutputLimit
	}
	if opts.OutputBudget <= 0 {
		opts.OutputBudget = DefaultOutputBudget
	}
	if opts.Ports == nil {
		opts.Ports = portproxy.New()
	}
	s := &Server{m: m, opts: opts, log: log.With("component", "api"), mux: http.NewServeMux(),
		outBudget: newOutputBudget(opts.OutputBudget), ports: opts.Ports}
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.pattern, s.adapt(r))
	}
	m.SetPortCloser(s.ClosePortConns)
	s.mux.HandleFunc("/", s.adapt(route{pattern: "unknown route", perm: anyone, inside: public,
		handler: func(w http.ResponseWriter, r *http.Request) error {
			return errdefs.NotFound("no such route: %s %s", r.Method, r.URL.Path)
		}}))
	return s
}

type route struct {
	pattern string
	handler handler
	// perm is what the caller must hold; anyone is any authenticated caller.
	perm auth.Permission
	// inside is how far a request from inside a sandbox goes (see confine).
	inside reach
}

// resumeRoute is the resume's route: a sandbox whose node is drained moves to the node
// that takes it, instead of being forwarded (manager.NodeOf).
const resumeRoute = "POST /v1/sandboxes/{ref}/resume"

// anyone marks a route every authenticated caller may call (its answer is scoped to
// the caller).
const anyone auth.Permission = ""

// handler is a route's handler (see httpedge.Handler); adapt writes its error.
type handler = httpedge.Handler

// adapt checks the route's permission (and, for a mutating call, that the audit log
// can be written), is the one place a handler's error becomes the response, and
// records the request in the audit log.
func (s *Server) adapt(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, noted := manager.NoteSandbox(r.Context())
		var proxied bool // another node answered, and records the call
		ctx = context.WithValue(ctx, proxiedKey{}, &proxied)
		if s.opts.AuditLog != nil && principal(r) != nil {
			ctx = audit.Hold(ctx) // a call's own records may go with its request's, in one write
		}
		r = r.WithContext(ctx)
		status, err := httpedge.Run(w, r, s.writeError, func(w http.ResponseWriter, r *http.Request) error {
			if err := permitted(r, rt.perm); err != nil {
				return err
			}
			if err := s.confine(r, rt.perm, rt.inside); err != nil {
				return err
			}
			if mutating(r) { // waits for the records of the reads answered before it
				s.readAudits.Lock()
				s.readAudits.Unlock()
			}
			if err := s.requestAudit().Ready(mutating(r)); err != nil {
				return err
			}
			if done, err := s.forwardCall(w, r, rt); done {
				return err
			}
			return rt.handler(w, r)
		})
		if principal(r) != nil && !proxied { // the exposed ports' traffic is no API request
			if !mutating(r) {
				// A read's answer does not wait for its audit record: the record
				// is written next, while the caller reads.
				s.readAudits.RLock()
				defer s.readAudits.RUnlock()
				http.NewResponseController(w).Flush()
			}
			s.auditRequest(r, rt.pattern, noted(), status, err, start)
		}
		httpedge.Abort(err)
	}
}

// permitted says whether the request's caller holds perm. The exposed ports' routes,
// which carry their own token and have no principal, are anyone's.
func permitted(r *http.Request, perm auth.Permission) error {
	return permittedTo(r, perm, "this call")
}

// permittedTo says whether the request's caller holds perm, which what needs.
func permittedTo(r *http.Request, perm auth.Permission, what string) error {
	p := principal(r)
	if perm == anyone || p.Can(perm) {
		return nil
	}
	if p == nil {
		return &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "this call needs an authenticated caller"}
	}
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied,
		Msg:     fmt.Sprintf("%s needs the %s permission, which the roles of %q (%s) do not grant", what, perm, p.Identity, strings.Join(p.Roles, ", ")),
		Details: map[string]any{"permission": string(perm)}}
}

// adminOnly refuses what, a part of a route that is the node's administrators' only,
// unless the caller holds the admin permission and is outside sandboxes.
func (s *Server) adminOnly(r *http.Request, what string) error {
	if err := permittedTo(r, auth.Admin, what); err != nil {
		return err
	}
	return s.confine(r, auth.Admin, outside)
}

func (s *Server) routes() []route {
	return []route{
		{"GET /v1/status", s.status, anyone, filtered},
		{"GET /v1/openapi.yaml", s.openapi, anyone, public},
		{"POST /v1/route", s.route, auth.SandboxRead, public},
		{"POST /v1/sandboxes", s.createSandbox, auth.SandboxCreate, creates},
		{"GET /v1/sandboxes", s.listSandboxes, auth.SandboxRead, filtered},
		{"GET /v1/sandboxes/{ref}", s.getSandbox, auth.SandboxRead, ownSandbox},
		{"DELETE /v1/sandboxes/{ref}", s.terminateSandbox, auth.SandboxCreate, ownSandbox},
		{"POST /v1/sandboxes/{ref}/suspend", s.suspendSandbox, auth.SandboxCreate, ownSandbox},
		{resumeRoute, s.resumeSandbox, auth.SandboxCreate, ownSandbox},
		{"GET /v1/events", s.events, auth.SandboxRead, namedSandbox},
		{"GET /v1/sandboxes/{ref}/stats", s.sandboxStats, auth.SandboxRead, ownSandbox},
		{"GET /v1/stats", s.allStats, auth.SandboxRead, filtered},
		{"GET /metrics", s.metrics, auth.MetricsRead, outside},
		{"GET /v1/sandboxes/{ref}/network", s.getNetwork, auth.SandboxRead, ownSandbox},
		{"PUT /v1/sandboxes/{ref}/network", s.setNetwork, auth.SandboxNetwork, ownSandbox},
		{"GET /v1/sandboxes/{ref}/egress", s.egressLog, auth.SandboxRead, ownSandbox},
		{"POST /v1/sandboxes/{ref}/ports", s.exposePort, auth.SandboxNetwork, ownSandbox},
		{"GET /v1/sandboxes/{ref}/ports", s.listPorts, auth.SandboxRead, ownSandbox},
		{"DELETE /v1/sandboxes/{ref}/ports/{port}", s.closePort, auth.SandboxNetwork, ownSandbox},
		{"GET /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy, anyone, public},
		{"POST /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy, anyone, public},
		{"PUT /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy, anyone, public},
		{"PATCH /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy, anyone, public},
		{"DELETE /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy, anyone, public},
		{"POST /v1/gc", s.gc, auth.SandboxAdmin, outside},
		{"GET /v1/pools", s.listPools, auth.Admin, outside},
		{"PUT /v1/pools/{name}", s.putPool, auth.Admin, outside},
		{"DELETE /v1/pools/{name}", s.deletePool, auth.Admin, outside},
		{"GET /v1/nodes", s.listNodes, auth.Admin, outside},
		{"POST /v1/nodes/{name}/drain", s.drainNode, auth.Admin, outside},
		{"POST /v1/nodes/{name}/ready", s.readyNode, auth.Admin, outside},
		{"POST /v1/sandboxes/{ref}/snapshots", s.createSnapshot, auth.SnapshotCreate, ownSandbox},
		{"POST /v1/sandboxes/{ref}/restore", s.restoreSandbox, auth.SnapshotCreate, ownSandbox},
		{"POST /v1/sandboxes/{ref}/fork", s.forkSandbox, auth.SandboxCreate, ownSandbox},
		{"GET /v1/snapshots", s.listSnapshots, auth.SnapshotRead, namedSandbox},
		{"GET /v1/snapshots/{id}", s.getSnapshot, auth.SnapshotRead, ownSnapshot},
		{"DELETE /v1/snapshots/{id}", s.deleteSnapshot, auth.SnapshotDelete, ownSnapshot},
		{"POST /v1/snapshots/{id}/fork", s.forkSnapshot, auth.SandboxCreate, ownSnapshot},
		// Volumes: managed from outside sandboxes.
		{"POST /v1/volumes", s.createVolume, auth.SandboxCreate, outside},
		{"GET /v1/volumes", s.listVolumes, auth.SandboxRead, outside},
		{"GET /v1/volumes/{name}", s.getVolume, auth.SandboxRead, outside},
		{"DELETE /v1/volumes/{name}", s.deleteVolume, auth.SandboxCreate, outside},
		{"POST /v1/volumes/{name}/resize", s.resizeVolume, auth.SandboxCreate, outside},
		{"POST /v1/volumes/{name}/snapshot", s.snapshotVolume, auth.SandboxCreate, outside},
		{"POST /v1/volumes/{name}/attach", s.attachVolume, auth.SandboxCreate, outside},
		{"POST /v1/volumes/{name}/detach", s.detachVolume, auth.SandboxCreate, outside},
		{"POST /v1/sandboxes/{ref}/exec", s.exec, auth.SandboxExec, ownSandbox},
		{"POST /v1/sandboxes/{ref}/sessions", s.startSession, auth.SandboxExec, ownSandbox},
		{"GET /v1/sandboxes/{ref}/sessions", s.listSessions, auth.SandboxRead, ownSandbox},
		{"POST /v1/sandboxes/{ref}/sessions/{sid}/send", s.send, auth.SandboxExec, ownSandbox},
		{"GET /v1/sandboxes/{ref}/sessions/{sid}/logs", s.sessionLogs, auth.SandboxExec, ownSandbox}, // a process's output, like an exec's
		{"DELETE /v1/sandboxes/{ref}/sessions/{sid}", s.closeSession, auth.SandboxExec, ownSandbox},
		{"PUT /v1/sandboxes/{ref}/files", s.upload, auth.SandboxFiles, ownSandbox},
		{"GET /v1/sandboxes/{ref}/files", s.download, auth.SandboxFiles, ownSandbox},
		{"DELETE /v1/sandboxes/{ref}/files", s.removeFile, auth.SandboxFiles, ownSandbox},
		{"GET /v1/sandboxes/{ref}/files/list", s.listFiles, auth.SandboxFiles, ownSandbox},
		{"GET /v1/sandboxes/{ref}/files/stat", s.statFile, auth.SandboxFiles, ownSandbox},
		{"POST /v1/sandboxes/{ref}/files/mkdir", s.mkdir, auth.SandboxFiles, ownSandbox},
		{"PUT /v1/sandboxes/{ref}/files/tar", s.uploadTree, auth.SandboxFiles, ownSandbox},
		{"GET /v1/sandboxes/{ref}/files/tar", s.downloadTree, auth.SandboxFiles, ownSandbox},
		{"POST /v1/sandboxes/{ref}/pty", s.pty, auth.SandboxExec, ownSandbox},
		{"GET /v1/operations/{id}", s.getOperation, anyone, ownOperation},
		{"GET /v1/images", s.listImages, auth.ImageRead, shared},
		{"POST /v1/images", s.importImage, auth.ImageCreate, shared},
		{"POST /v1/images/pull", s.pullImage, auth.ImageCreate, shared},
		{"POST /v1/images/prune", s.pruneImages, auth.ImageDelete, shared},
		{"GET /v1/images/{ref}", s.getImage, auth.ImageRead, shared},
		{"GET /v1/images/{ref}/export", s.exportImage, auth.ImageRead, shared},
		{"POST /v1/registries/login", s.registryLogin, auth.SecretCreate, outside},
		{"DELETE /v1/registries/{registry}", s.registryLogout, auth.SecretCreate, outside},
		{"DELETE /v1/images/{ref}", s.removeImage, auth.ImageDelete, shared},
		{"GET /v1/users", s.listUsers, auth.Admin, outside},
		{"POST /v1/users", s.createUser, auth.Admin, outside},
		{"DELETE /v1/users/{name}", s.deleteUser, auth.Admin, outside},
		{"PUT /v1/users/{name}/roles", s.setUserRoles, auth.Admin, outside},
		{"GET /v1/roles", s.listRoles, anyone, public},
		{"PUT /v1/roles/{name}", s.putRole, auth.Admin, outside},
		{"DELETE /v1/roles/{name}", s.deleteRole, auth.Admin, outside},
		{"GET /v1/tokens", s.listTokens, auth.Admin, outside},
		{"POST /v1/tokens", s.createToken, auth.Admin, outside},
		{"DELETE /v1/tokens/{id}", s.revokeToken, auth.Admin, outside},
		{"GET /v1/whoami", s.whoami, anyone, public},
		{"GET /v1/audit", s.auditList, auth.AuditRead, outside},
		{"POST /v1/audit/verify", s.auditVerify, auth.Admin, outside},
		{"GET /v1/secrets", s.listSecrets, auth.SecretCreate, outside},
		{"POST /v1/secrets", s.createSecret, auth.SecretCreate, outside},
		{"POST /v1/secrets/rekey", s.rekeySecrets, auth.Admin, outside},
		{"GET /v1/secrets/{name}", s.getSecret, auth.SecretCreate, outside},
		{"POST /v1/secrets/{name}/rotate", s.rotateSecret, auth.SecretCreate, outside},
		{"DELETE /v1/secrets/{name}", s.revokeSecret, auth.SecretCreate, outside},
		{"POST /v1/secrets/{name}/bindings", s.bindSecret, auth.SecretBind, outside},
		{"DELETE /v1/secrets/{name}/bindings", s.unbindSecret, auth.SecretBind, outside},
	}
}

// RoutePermissions maps "METHOD /path" of every API route to the permission it needs
// ("" for any authenticated caller); the exposed ports' routes, which carry their own
// tokens, are left out.
func (s *Server) RoutePermissions() map[string]string {
	out := map[string]string{}
	for _, r := range s.routes() {
		if !strings.Contains(r.pattern, " /v1/ports/") {
			out[r.pattern] = string(r.perm)
		}
	}
	return out
}

// RouteReach maps "METHOD /path" of every route to how far a request from inside a
// sandbox goes on it ("" for a route that does not say, which such requests are refused).
func (s *Server) RouteReach() map[string]string {
	out := map[string]string{}
	for _, r := range s.routes() {
		out[r.pattern] = reachNames[r.inside]
	}
	return out
}

// Routes lists "METHOD /path" for every route the server serves.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.routes() {
		out = append(out, r.pattern)
	}
	return out
}

// ServeHTTP authenticates and dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := refuseForwarding(r); err != nil {
		s.writeError(w, r, err)
		s.auditRequest(r, r.Method+" "+r.URL.Path, "", http.StatusForbidden, err, time.Now())
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v1/ports/") {
		// Exposed ports carry their own token (or are public), not an API credential.
		s.mux.ServeHTTP(w, r)
		return
	}
	p, err := s.authenticate(r)
	if err != nil {
		s.writeError(w, r, err)
		s.auditRequest(r, r.Method+" "+r.URL.Path, "", http.StatusUnauthorized, err, time.Now())
		return
	}
	s.serveAs(w, r, p)
}

// serveAs dispatches r as p's call.
func (s *Server) serveAs(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	ctx := manager.WithActor(context.WithValue(r.Context(), principalKey, p), p.Identity)
	if p.Sandbox != "" {
		ctx = manager.WithCreator(ctx, p.Sandbox)
	}
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

// ConnContext records the uid of a unix socket connection's peer (SO_PEERCRED); pass
// it to http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if uid, ok := auth.PeerUID(c); ok {
		return context.WithValue(ctx, peerKey, uid)
	}
	return ctx
}

// ServeFromSandbox serves a request that code inside a sandbox sent to the API through
// the egress proxy: the only credential it accepts is that sandbox's session token,
// which the proxy put in place of the sandbox's placeholder.
func (s *Server) ServeFromSandbox(w http.ResponseWriter, r *http.Request, sandbox string) {
	s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey, sandbox)))
}

// authenticate finds the caller: a bearer token's identity, else the identity of the
// unix socket peer's uid. Over TCP a token is required.
func (s *Server) authenticate(r *http.Request) (*auth.Principal, error) {
	if s.opts.Auth == nil {
		return nil, errdefs.Unavailable("this server has no authentication")
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if h != "" && (!ok || tok == "") {
		return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "the Authorization header must be \"Bearer <token>\""}
	}
	if sb, from := r.Context().Value(sandboxKey).(string); from {
		if !strings.HasPrefix(tok, auth.SessionPrefix) {
			return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated,
				Msg: "from inside a sandbox, send its session credential: Authorization: Bearer $(cat " + manager.SessionTokenPath + ")"}
		}
		return s.opts.Auth.AuthenticateSession(r.Context(), tok, sb)
	}
	if h != "" {
		return s.opts.Auth.Authenticate(r.Context(), tok)
	}
	if uid, ok := r.Context().Value(peerKey).(int); ok {
		return s.opts.Auth.ForUID(r.Context(), uid)
	}
	return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "a bearer token is required (Authorization: Bearer <token>)"}
}

// principal is the request's authenticated caller (nil on the exposed ports' routes).
func principal(r *http.Request) *auth.Principal {
	p, _ := r.Context().Value(principalKey).(*auth.Principal)
	return p
}

// owner is the caller's identity: the owner of what it makes and sees.
func owner(r *http.Request) string {
	if p := principal(r); p != nil {
		return p.Identity
	}
	return ""
}

// scope is the owner among whose sandboxes a request's {ref} is found: the caller's own,
// or, for a caller with sandbox.admin naming another identity's sandbox by its id, that
// identity's. By name, a caller only ever reaches its own.
func (s *Server) scope(r *http.Request) string {
	ref := r.PathValue("ref")
	if strings.HasPrefix(ref, "sb_") && principal(r).Can(auth.SandboxAdmin) {
		if o, err := s.m.OwnerOf(r.Context(), ref); err == nil {
			return o
		}
	}
	return owner(r)
}

// isAdmin says whether the caller holds the admin permission.
func isAdmin(r *http.Request) bool { return principal(r).Can(auth.Admin) }

// decode reads r's JSON body into v strictly: unknown fields, trailing data, empty and
// oversize bodies are refused.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return jsonbody.Decode(w, r, v, jsonbody.Options{})
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpedge.WriteJSON(w, status, v) }

// apiError turns any error into the wire shape, logging what the client does not see.
func (s *Server) apiError(r *http.Request, err error) (int, api.Error) {
	code, status := errdefs.Code(err), httpstatus.Status(err)
	if errors.Is(err, errRangeUnsatisfiable) {
		code, status = "invalid_argument", http.StatusRequestedRangeNotSatisfiable
	}
	msg, details := errdefs.Message(err), errdefs.Details(err)
	switch {
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The caller went away; nothing failed that it could still hear of.
		s.log.Debug("request abandoned by its caller", "method", r.Method, "path", r.URL.Path)
	case code == "internal":
		// The cause (a database error, a host path) goes to the log under an id the
		// caller is given; an operation's failure already carries its operation's id.
		if _, isOp := details["operation_id"]; !isOp {
			msg, details = httpedge.InternalAnswer(s.log, "request failed", err, "method", r.Method, "path", r.URL.Path)
		}
	case code == "unavailable":
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	return status, api.Error{Code: code, Message: msg, Details: details}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, e := s.apiError(r, err)
	writeJSON(w, status, api.ErrorBody{Error: e})
}

// call reads the Idempotency-Key and If-Match headers of a mutating request; its owner
// is the request's scope.
func (s *Server) call(r *http.Request) (manager.Call, error) {
	c := manager.Call{Owner: s.scope(r), Admin: isAdmin(r), IdempotencyKey: r.Header.Get("Idempotency-Key")}
	if im := r.Header.Get("If-Match"); im != "" {
		v, err := strconv.ParseInt(strings.Trim(im, `"`), 10, 64)
		if err != nil || v <= 0 {
			return c, errdefs.Invalid("invalid If-Match %q: use the sandbox's ETag, a quoted version number such as \"3\"", im)
		}
		c.IfMatch = v
	}
	return c, nil
}

func etag(version int64) string { return fmt.Sprintf("%q", strconv.FormatInt(version, 10)) }

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(api.OpenAPI)
	return nil
}

// decodeCall decodes a mutating request's body and its Idempotency-Key and If-Match
// headers.
func (s *Server) decodeCall(w http.ResponseWriter, r *http.Request, v any) (manager.Call, error) {
	if err := decode(w, r, v); err != nil {
		return manager.Call{}, err
	}
	return s.call(r)
}
