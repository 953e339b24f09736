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
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// maxBody bounds every JSON request body.
const maxBody = 1 << 20

// errTooLarge marks an oversize body: invalid_argument, with status 413.
var errTooLarge = errors.New("request body too large")

// LocalOwner owns everything done through the unix socket; it is the node's
// administrator, and no token may name it.
const LocalOwner = config.LocalOwner

// Options configure the server.
type Options struct {
	// Tokens maps bearer tokens to owners, for TCP clients.
	Tokens map[string]string
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
}

// Server is the HTTP API.
type Server struct {
	m    *manager.Manager
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	ports     portConns
	outBudget *outputBudget
}

type ctxKey int

const (
	ownerKey ctxKey = iota
	localKey
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
	s := &Server{m: m, opts: opts, log: log.With("component", "api"), mux: http.NewServeMux(),
		outBudget: newOutputBudget(opts.OutputBudget)}
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.pattern, s.adapt(r.handler))
	}
	m.SetPortCloser(s.ClosePortConns)
	s.mux.HandleFunc("/", s.adapt(func(w http.ResponseWriter, r *http.Request) error {
		return errdefs.NotFound("no such route: %s %s", r.Method, r.URL.Path)
	}))
	return s
}

type route struct {
	pattern string
	handler handler
}

// handler is a route's handler: it writes its answer, or returns the error that
// refuses the request, and adapt writes that. A handler that has begun its answer
// (a stream) reports later failures in the stream and returns nil.
type handler func(w http.ResponseWriter, r *http.Request) error

// adapt is the one place a handler's error becomes the response.
func (s *Server) adapt(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

func (s *Server) routes() []route {
	return []route{
		{"GET /v1/status", s.status},
		{"GET /v1/openapi.yaml", s.openapi},
		{"POST /v1/sandboxes", s.createSandbox},
		{"GET /v1/sandboxes", s.listSandboxes},
		{"GET /v1/sandboxes/{ref}", s.getSandbox},
		{"DELETE /v1/sandboxes/{ref}", s.terminateSandbox},
		{"POST /v1/sandboxes/{ref}/suspend", s.suspendSandbox},
		{"POST /v1/sandboxes/{ref}/resume", s.resumeSandbox},
		{"GET /v1/events", s.events},
		{"GET /v1/sandboxes/{ref}/network", s.getNetwork},
		{"PUT /v1/sandboxes/{ref}/network", s.setNetwork},
		{"GET /v1/sandboxes/{ref}/egress", s.egressLog},
		{"POST /v1/sandboxes/{ref}/ports", s.exposePort},
		{"GET /v1/sandboxes/{ref}/ports", s.listPorts},
		{"DELETE /v1/sandboxes/{ref}/ports/{port}", s.closePort},
		{"GET /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy},
		{"POST /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy},
		{"PUT /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy},
		{"PATCH /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy},
		{"DELETE /v1/ports/{sandbox}/{port}/{rest...}", s.portProxy},
		{"POST /v1/gc", s.gc},
		{"POST /v1/sandboxes/{ref}/snapshots", s.createSnapshot},
		{"POST /v1/sandboxes/{ref}/restore", s.restoreSandbox},
		{"POST /v1/sandboxes/{ref}/fork", s.forkSandbox},
		{"GET /v1/snapshots", s.listSnapshots},
		{"GET /v1/snapshots/{id}", s.getSnapshot},
		{"DELETE /v1/snapshots/{id}", s.deleteSnapshot},
		{"POST /v1/snapshots/{id}/fork", s.forkSnapshot},
		{"POST /v1/sandboxes/{ref}/exec", s.exec},
		{"POST /v1/sandboxes/{ref}/sessions", s.startSession},
		{"GET /v1/sandboxes/{ref}/sessions", s.listSessions},
		{"POST /v1/sandboxes/{ref}/sessions/{sid}/send", s.send},
		{"DELETE /v1/sandboxes/{ref}/sessions/{sid}", s.closeSession},
		{"PUT /v1/sandboxes/{ref}/files", s.upload},
		{"GET /v1/sandboxes/{ref}/files", s.download},
		{"DELETE /v1/sandboxes/{ref}/files", s.removeFile},
		{"GET /v1/sandboxes/{ref}/files/list", s.listFiles},
		{"GET /v1/sandboxes/{ref}/files/stat", s.statFile},
		{"POST /v1/sandboxes/{ref}/files/mkdir", s.mkdir},
		{"POST /v1/sandboxes/{ref}/pty", s.pty},
		{"GET /v1/operations/{id}", s.getOperation},
		{"GET /v1/images", s.listImages},
		{"POST /v1/images", s.importImage},
		{"DELETE /v1/images/{ref}", s.removeImage},
	}
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
	if strings.HasPrefix(r.URL.Path, "/v1/ports/") {
		// Exposed ports carry their own token (or are public), not an API credential.
		s.mux.ServeHTTP(w, r)
		return
	}
	owner, err := s.authenticate(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), ownerKey, owner))
	s.mux.ServeHTTP(w, r)
}

// ConnContext marks connections that came through the unix socket; pass it to
// http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.LocalAddr().(*net.UnixAddr); ok {
		return context.WithValue(ctx, localKey, true)
	}
	return ctx
}

func (s *Server) authenticate(r *http.Request) (string, error) {
	if local, _ := r.Context().Value(localKey).(bool); local {
		return LocalOwner, nil
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "a bearer token is required (Authorization: Bearer <token>)"}
	}
	for t, owner := range s.opts.Tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			return owner, nil
		}
	}
	return "", &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "the bearer token is not valid"}
}

func owner(r *http.Request) string {
	o, _ := r.Context().Value(ownerKey).(string)
	return o
}

// decode reads a JSON body strictly: unknown fields, trailing data and oversize bodies
// are refused.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Msg: fmt.Sprintf("request body is larger than %d bytes", maxBody), Cause: errTooLarge}
		case errors.Is(err, io.EOF):
			return errdefs.Invalid("request body is empty; a JSON object is required")
		default:
			return errdefs.Invalid("invalid request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if dec.More() {
		return errdefs.Invalid("invalid request body: more than one JSON value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// apiError turns any error into the wire shape, logging what the client does not see.
func (s *Server) apiError(r *http.Request, err error) (int, api.Error) {
	code, status := errdefs.Code(err)
	if errors.Is(err, errTooLarge) {
		status = http.StatusRequestEntityTooLarge
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
			id := newRequestID()
			msg = manager.InternalMessage("request", id)
			details = map[string]any{"request_id": id}
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", id, "err", err)
		}
	case code == "unavailable":
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	return status, api.Error{Code: code, Message: msg, Details: details}
}

// newRequestID names one failed request in the log and in its answer.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, e := s.apiError(r, err)
	writeJSON(w, status, api.ErrorBody{Error: e})
}

// call reads the Idempotency-Key and If-Match headers of a mutating request.
func call(r *http.Request) (manager.Call, error) {
	c := manager.Call{Owner: owner(r), IdempotencyKey: r.Header.Get("Idempotency-Key")}
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
	return call(r)
}
