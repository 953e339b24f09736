package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb/filesystempbconnect"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb/processpbconnect"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// EnvdPort is the port E2B's SDKs address a sandbox's in-sandbox plane at.
const EnvdPort = 49983

// The in-sandbox (envd) plane. A request reaches it, on the same listener as the
// control plane, when it names a sandbox: by the E2b-Sandbox-Id and E2b-Sandbox-Port
// headers (what the SDKs send when E2B_SANDBOX_URL is set), or by a host name
// PORT-ID.DOMAIN under the configured domain. Port EnvdPort is the plane itself (the
// Connect process and filesystem services and the /files routes); any other port is
// proxied to that port on the sandbox's loopback.
//
// No API key comes with these requests: the SDKs send the sandbox's envd access token
// (X-Access-Token) that create, connect and resume returned, or a signed URL made
// with it. The tokens are MACs of the sandbox id under a key of the node, so they are
// checked without a lookup and cannot be made for another sandbox; the caller then
// acts as the sandbox's owner on that sandbox alone.

// Header names of the envd plane.
const (
	hdrSandboxID    = "E2b-Sandbox-Id"
	hdrSandboxPort  = "E2b-Sandbox-Port"
	hdrAccessToken  = "X-Access-Token"
	hdrTrafficToken = "E2b-Traffic-Access-Token"
)

// tokenFor is sandbox id's token of the given kind ("envd", "traffic").
func (c *Control) tokenFor(kind, id string) string {
	mac := hmac.New(sha256.New, c.opts.TokenKey)
	fmt.Fprintf(mac, "airlock e2b %s token\x00%s", kind, id)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (c *Control) envdToken(id string) string    { return c.tokenFor("envd", id) }
func (c *Control) trafficToken(id string) string { return c.tokenFor("traffic", id) }

// target is the sandbox an envd request reaches, resolved and authorized.
type target struct {
	id, owner string
	ag        *agent.Client
	// user is the user name the request acts as (the Basic authorization's user name);
	// "" is the sandbox's default user.
	user string
	env  map[string]string // the sandbox's environment, as created
}

type targetKey struct{}

func targetOf(ctx context.Context) *target {
	t, _ := ctx.Value(targetKey{}).(*target)
	return t
}

// sandboxAddr is what names the sandbox and port a request is for.
func (c *Control) sandboxAddr(r *http.Request) (id string, port int, ok bool, err error) {
	if id = r.Header.Get(hdrSandboxID); id != "" {
		port = EnvdPort
		if ps := r.Header.Get(hdrSandboxPort); ps != "" {
			if port, err = strconv.Atoi(ps); err != nil || port < 1 || port > 65535 {
				return "", 0, true, errdefs.Invalid("%s %q is not a port (1-65535)", hdrSandboxPort, ps)
			}
		}
		return id, port, true, nil
	}
	if c.opts.Domain == "" {
		return "", 0, false, nil
	}
	host := r.Host
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	sub, found := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(c.opts.Domain))
	if !found {
		return "", 0, false, nil
	}
	ps, id, found := strings.Cut(sub, "-")
	if !found || strings.Contains(id, ".") {
		return "", 0, true, errdefs.NotFound("host %q is not PORT-SANDBOXID.%s", r.Host, c.opts.Domain)
	}
	if port, err = strconv.Atoi(ps); err != nil || port < 1 || port > 65535 {
		return "", 0, true, errdefs.NotFound("host %q: %q is not a port (1-65535)", r.Host, ps)
	}
	return id, port, true, nil
}

// serveSandbox serves a request that names a sandbox.
func (c *Control) serveSandbox(w http.ResponseWriter, r *http.Request, id string, port int) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	t, err := c.authorizeSandbox(r, id, port)
	if err != nil {
		c.writeError(rec, r, err)
		c.auditSandbox(r, id, port, t, rec.status, err, start)
		return
	}
	ctx := manager.WithActor(context.WithValue(r.Context(), targetKey{}, t), t.owner)
	r = r.WithContext(ctx)
	if port != EnvdPort {
		c.proxyPort(rec, r, t, port)
	} else {
		c.envd.ServeHTTP(rec, r)
	}
	if r.Method != http.MethodGet && r.URL.Path != "/health" {
		c.auditSandbox(r, id, port, t, rec.status, nil, start)
	}
}

// authorizeSandbox checks the request's token for sandbox id and returns the target.
// A token that is missing or wrong, and a sandbox that does not exist, are the same
// "not found" when no valid token was shown, so ids cannot be probed.
func (c *Control) authorizeSandbox(r *http.Request, id string, port int) (*target, error) {
	if len(c.opts.TokenKey) == 0 {
		return nil, errdefs.Unavailable("this node's E2B-compatible plane has no token key")
	}
	ok := c.validToken(r, id, port)
	if !ok {
		return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated,
			Msg: fmt.Sprintf("the sandbox's access token is required in %s (create, connect and resume return it as envdAccessToken), or a signed URL", hdrAccessToken)}
	}
	ag, sb, err := c.m.AgentOf(r.Context(), id)
	if err != nil {
		return nil, err
	}
	t := &target{id: id, owner: sb.Owner, ag: ag, env: sb.Env}
	if u, _, ok := r.BasicAuth(); ok {
		t.user = u
	}
	if u := r.URL.Query().Get("username"); u != "" && r.URL.Path == "/files" {
		t.user = u
	}
	return t, nil
}

// validToken says whether the request carries a token for sandbox id: the envd access
// token, for any port; the traffic token, for ports other than envd's; or, for the
// /files routes, a signature made with the envd access token (signed URLs).
func (c *Control) validToken(r *http.Request, id string, port int) bool {
	if tok := r.Header.Get(hdrAccessToken); tok != "" && hmac.Equal([]byte(tok), []byte(c.envdToken(id))) {
		return true
	}
	if port != EnvdPort {
		if tok := r.Header.Get(hdrTrafficToken); tok != "" && hmac.Equal([]byte(tok), []byte(c.trafficToken(id))) {
			return true
		}
		return false
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
		return c.validSignature(r, id)
	}
	return false
}

// validSignature checks a signed /files URL: signature is "v1_" and the unpadded
// base64 SHA-256 of "path:operation:user:token[:expiration]", operation "read" for GET
// and "write" for POST; an expiration (Unix seconds) must not have passed.
func (c *Control) validSignature(r *http.Request, id string) bool {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + c.envdToken(id)
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	return hmac.Equal([]byte(q.Get("signature")), []byte(want))
}

// auditSandbox records a request of the envd plane that changes something, or failed.
func (c *Control) auditSandbox(r *http.Request, id string, port int, t *target, status int, err error, start time.Time) {
	if c.opts.AuditLog == nil {
		return
	}
	result := strconv.Itoa(status)
	if err != nil {
		code, _ := errdefs.Code(err)
		result += " " + code
	}
	action := "E2B envd " + r.URL.Path
	if port != EnvdPort {
		action = fmt.Sprintf("E2B port %d", port)
	}
	e := audit.Entry{Action: audit.Clip(action), Result: result, Source: "e2b tcp " + r.RemoteAddr,
		Resource: audit.Clip("id=" + id), Detail: map[string]any{"duration_ms": time.Since(start).Milliseconds()}}
	if t != nil {
		e.Identity = t.owner
	}
	if aerr := c.opts.AuditLog.Append(r.Context(), e); aerr != nil {
		c.log.Error("audit log", "err", aerr)
	}
}

// envdMux serves the in-sandbox plane of an authorized request.
func (c *Control) envdMux() *http.ServeMux {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithInterceptors(errorInterceptor{c})}
	path, h := processpbconnect.NewProcessHandler(&processService{c: c}, opts...)
	mux.Handle(path, h)
	path, h = filesystempbconnect.NewFilesystemHandler(&filesystemService{c: c}, opts...)
	mux.Handle(path, h)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", c.adaptEnvd(c.download))
	mux.HandleFunc("POST /files", c.adaptEnvd(c.upload))
	mux.HandleFunc("GET /envs", c.adaptEnvd(c.envs))
	mux.HandleFunc("/", c.adaptEnvd(func(w http.ResponseWriter, r *http.Request, t *target) error {
		return errdefs.NotFound("%s %s is not part of Airlock's E2B-compatible in-sandbox plane (see docs/e2b.md for what is)", r.Method, r.URL.Path)
	}))
	return mux
}

// adaptEnvd runs a plain HTTP handler of the envd plane and writes its error in E2B's
// shape.
func (c *Control) adaptEnvd(h func(w http.ResponseWriter, r *http.Request, t *target) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r, targetOf(r.Context())); err != nil {
			c.writeError(w, r, err)
		}
	}
}

// envs answers the sandbox's environment variables, those it was created with.
func (c *Control) envs(w http.ResponseWriter, r *http.Request, t *target) error {
	out := t.env
	if out == nil {
		out = map[string]string{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// errorInterceptor turns the errors of the Connect services into Connect errors with
// the code that matches their class; an internal error's cause goes to the log only.
type errorInterceptor struct{ c *Control }

func (e errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, e.c.connectError(req.Spec().Procedure, err)
	}
}

func (e errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return e.c.connectError(conn.Spec().Procedure, next(ctx, conn))
	}
}

// connectError maps err to a Connect error.
func (c *Control) connectError(procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	code, _ := errdefs.Code(err)
	msg := audit.Clip(errdefs.Message(err)) // an agent's message is the sandbox's text
	cc := connect.CodeUnknown
	switch code {
	case "invalid_argument":
		cc = connect.CodeInvalidArgument
	case "not_found":
		cc = connect.CodeNotFound
	case "already_exists":
		cc = connect.CodeAlreadyExists
	case "permission_denied":
		cc = connect.CodePermissionDenied
	case "unauthenticated":
		cc = connect.CodeUnauthenticated
	case "failed_precondition", "version_conflict", "idempotency_conflict":
		cc = connect.CodeFailedPrecondition
	case "quota_exceeded":
		cc = connect.CodeResourceExhausted
	case "unavailable":
		cc = connect.CodeUnavailable
	case "internal":
		c.log.Error("envd call failed", "procedure", procedure, "err", err)
		cc, msg = connect.CodeInternal, "internal error; the daemon's log has the cause"
	}
	return connect.NewError(cc, errors.New(msg))
}

// received is one result of a stream's next.
type received[T any] struct {
	v   T
	err error
}

// receive reads next on a goroutine of its own and hands each result over the channel
// it returns, until next fails or last says the value ended the stream. stop ends the
// stream with closeFn, which must unblock next, and waits for the reader to end.
func receive[T any](next func() (T, error), last func(T) bool, closeFn func() error) (<-chan received[T], func()) {
	ch := make(chan received[T])
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			v, err := next()
			select {
			case ch <- received[T]{v, err}:
			case <-done:
				return
			}
			if err != nil || last(v) {
				return
			}
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(done)
			closeFn()
			<-ended
		})
	}
}
