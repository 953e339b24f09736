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

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb/filesystempbconnect"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb/processpbconnect"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpedge"
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
// with it. A token names the API key it was issued to, and is a MAC of the sandbox id,
// its owner and that key under a key of the node, so it cannot be made for another
// sandbox. Each request checks the key again, with the owner's roles as they are now:
// revoking the key, or narrowing the roles, takes effect on the next request.

// Header names of the envd plane.
const (
	hdrSandboxID    = "E2b-Sandbox-Id"
	hdrSandboxPort  = "E2b-Sandbox-Port"
	hdrAccessToken  = "X-Access-Token"
	hdrTrafficToken = "E2b-Traffic-Access-Token"
)

// tokenVersion starts every access token this plane issues.
const tokenVersion = "al1"

// tokenFor is the token of the given kind ("envd", "traffic") for sandbox id of owner,
// issued to owner's API key keyID: "al1.KEYID.MAC".
func (c *Control) tokenFor(kind, id, owner, keyID string) string {
	mac := hmac.New(sha256.New, c.opts.TokenKey)
	fmt.Fprintf(mac, "airlock e2b %s token\x00%s\x00%s\x00%s", kind, id, owner, keyID)
	return tokenVersion + "." + keyID + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// keyOf is the API key id a token names, if it is shaped as this plane's tokens are.
func keyOf(tok string) (string, bool) {
	v, rest, ok := strings.Cut(tok, ".")
	if !ok || v != tokenVersion {
		return "", false
	}
	key, _, ok := strings.Cut(rest, ".")
	if !ok || key == "" || len(key) > 64 || strings.ContainsFunc(key, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "", false
	}
	return key, true
}

// target is the sandbox an envd request reaches, resolved and authorized.
type target struct {
	id, owner string
	// wk reaches the sandbox's processes and files; nil for the calls that need none
	// (health, envs), which leave a paused sandbox paused.
	wk *manager.Work
	sb *manager.Sandbox // its record: state and environment as created
	// user is the user name the request acts as (the Basic authorization's user name);
	// "" until lookupUser settles it is DefaultUser (see lookupUser).
	user string
	// node, when set, is the node that holds the sandbox and answers the call, which
	// goes to it as the owner's API key keyID (see forward.go).
	node, keyID string

	userMu   sync.Mutex
	userInfo *agentproto.UserInfo // user as the agent described it, once asked
}

// DefaultUser is the user an envd request that names none acts as, E2B's default: the
// base template's sandboxes have it (uid 1000, home /home/user).
const DefaultUser = "user"

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
	rec := &httpedge.Recorder{ResponseWriter: w}
	t, err := c.authorizeSandbox(r, id, port)
	if err != nil {
		c.writeError(rec, r, err)
		c.auditSandbox(r, id, port, t, rec.Status(), err, start)
		return
	}
	if t.node != "" {
		if err := c.forwardSandbox(rec, r, t.node, id, t.owner, t.keyID, port); err != nil {
			c.writeError(rec, r, err)
			c.auditSandbox(r, id, port, t, rec.Status(), err, start)
		}
		return
	}
	ctx := manager.WithActor(context.WithValue(r.Context(), targetKey{}, t), t.owner)
	r = r.WithContext(ctx)
	if port != EnvdPort {
		// What a port's own server is asked is the sandbox's business, not the node's:
		// it is not audited, as Airlock's exposed ports are not.
		c.proxyPort(rec, r, t, port)
		return
	}
	changes := r.Method != http.MethodGet && !isHealth(r, port)
	if err := c.requestAudit().Ready(changes); err != nil {
		c.writeError(rec, r, err)
		return
	}
	c.envd.ServeHTTP(rec, r)
	if changes {
		c.auditSandbox(r, id, port, t, rec.Status(), nil, start)
	}
}

// permissionFor is the permission a request of the plane needs: a port's traffic is
// sandbox.network, the process service sandbox.exec, files sandbox.files, the rest
// (health, envs) sandbox.read.
func permissionFor(r *http.Request, port int) auth.Permission {
	switch {
	case port != EnvdPort:
		return auth.SandboxNetwork
	case strings.HasPrefix(r.URL.Path, "/"+processpbconnect.ProcessName+"/"):
		return auth.SandboxExec
	case strings.HasPrefix(r.URL.Path, "/"+filesystempbconnect.FilesystemName+"/"), r.URL.Path == "/files":
		return auth.SandboxFiles
	}
	return auth.SandboxRead
}

// isHealth says whether r is envd's health check, which a sandbox that was killed still
// answers (502, as E2B's does) to its own token while its record is kept.
func isHealth(r *http.Request, port int) bool {
	return port == EnvdPort && r.URL.Path == "/health"
}

// needsAgent says whether a request reaches the sandbox's agent (and so resumes a
// paused sandbox); health and envs are answered from the sandbox's record.
func needsAgent(r *http.Request, port int) bool {
	return port != EnvdPort || (!isHealth(r, port) && r.URL.Path != "/envs")
}

// authorizeSandbox checks the request's token for sandbox id, and the API key and
// permission behind it, and returns the target. A token that is missing or wrong, and
// a sandbox that does not exist, are the same refusal, so ids cannot be probed.
func (c *Control) authorizeSandbox(r *http.Request, id string, port int) (*target, error) {
	if len(c.opts.TokenKey) == 0 || c.opts.Auth == nil {
		return nil, errdefs.Unavailable("this node's E2B-compatible plane has no token key")
	}
	refused := &errdefs.Error{Class: errdefs.ErrUnauthenticated,
		Msg: fmt.Sprintf("the sandbox's access token is required in %s (create, connect and resume return it as envdAccessToken), or a signed URL", hdrAccessToken)}
	if !carriesCredential(r, port) {
		return nil, refused // without a store read: a request with nothing to check is free to refuse
	}
	ctx := r.Context()
	sb, err := c.m.ByID(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && e2bState(sb.State) == "" && !isHealth(r, port)) {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	keyID, ok, err := c.validToken(r, sb, port)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, refused
	}
	p, err := c.opts.Auth.TokenPrincipal(ctx, sb.Owner, keyID)
	if err != nil {
		return nil, err
	}
	if perm := permissionFor(r, port); !p.Can(perm) {
		return nil, &errdefs.Error{Class: errdefs.ErrPermissionDenied,
			Msg: fmt.Sprintf("%s lacks %s, which this call needs", p.Identity, perm)}
	}
	t := &target{id: id, owner: sb.Owner, sb: sb}
	if c.forwarding(r) && sb.Node != "" && sb.Node != c.m.NodeName() {
		t.node, t.keyID = sb.Node, keyID
		return t, nil
	}
	if needsAgent(r, port) {
		if t.wk, err = c.m.WorkOn(ctx, sb); err != nil {
			return nil, err
		}
		t.sb = t.wk.Sandbox()
	}
	if u, _, ok := r.BasicAuth(); ok {
		t.user = u
	}
	if u := r.URL.Query().Get("username"); u != "" && r.URL.Path == "/files" {
		t.user = u
	}
	return t, nil
}

// carriesCredential says whether the request has something validToken could accept: a
// token shaped as this plane's, or a signed /files URL.
func carriesCredential(r *http.Request, port int) bool {
	if _, ok := keyOf(r.Header.Get(hdrAccessToken)); ok {
		return true
	}
	if port != EnvdPort {
		_, ok := keyOf(r.Header.Get(hdrTrafficToken))
		return ok
	}
	return r.URL.Path == "/files" && r.URL.Query().Get("signature") != ""
}

// validToken says whether the request carries a token for sb, and which API key it
// was issued to: the envd access token, for any port; the traffic token, for ports
// other than envd's; or, for the /files routes, a signature made with the envd access
// token (signed URLs).
func (c *Control) validToken(r *http.Request, sb *manager.Sandbox, port int) (string, bool, error) {
	check := func(kind, tok string) (string, bool) {
		key, ok := keyOf(tok)
		return key, ok && hmac.Equal([]byte(tok), []byte(c.tokenFor(kind, sb.ID, sb.Owner, key)))
	}
	if key, ok := check("envd", r.Header.Get(hdrAccessToken)); ok {
		return key, true, nil
	}
	if port != EnvdPort {
		key, ok := check("traffic", r.Header.Get(hdrTrafficToken))
		return key, ok, nil
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
		return c.validSignature(r, sb)
	}
	return "", false, nil
}

// maxSignatureKeys bounds the API keys a signed URL is checked against (the URL does
// not say which key's token signed it).
const maxSignatureKeys = 256

// validSignature checks a signed /files URL: signature is "v1_" and the unpadded
// base64 SHA-256 of "path:operation:user:token[:expiration]", operation "read" for GET
// and "write" for POST; an expiration (Unix seconds) must not have passed. The token
// is the envd access token of one of the owner's valid API keys. A valid signature
// past its expiration is refused as envd refuses it ("signature is already expired");
// any other is refused without saying why, so that a forger learns nothing.
func (c *Control) validSignature(r *http.Request, sb *manager.Sandbox) (string, bool, error) {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	suffix, expired := "", false
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return "", false, nil
		}
		suffix, expired = ":"+exp, time.Now().Unix() > n
	}
	keys, err := c.opts.Auth.LiveTokens(r.Context(), sb.Owner)
	if err != nil {
		return "", false, err
	}
	got := []byte(q.Get("signature"))
	for _, key := range keys[:min(len(keys), maxSignatureKeys)] {
		raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + c.tokenFor("envd", sb.ID, sb.Owner, key) + suffix
		sum := sha256.Sum256([]byte(raw))
		if hmac.Equal(got, []byte("v1_"+base64.RawStdEncoding.EncodeToString(sum[:]))) {
			if expired {
				return "", false, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "signature is already expired"}
			}
			return key, true, nil
		}
	}
	return "", false, nil
}

// auditSandbox records a request of the envd plane that changes something, or failed.
func (c *Control) auditSandbox(r *http.Request, id string, port int, t *target, status int, err error, start time.Time) {
	action := "E2B envd " + r.URL.Path
	if port != EnvdPort {
		action = fmt.Sprintf("E2B port %d", port)
	}
	e := audit.Entry{Action: action, Source: source(r), Resource: audit.Clip("id=" + id)}
	if t != nil {
		e.Identity, e.Sandbox = t.owner, t.id
	}
	c.requestAudit().Record(r, e, status, err, start)
}

// envdMux serves the in-sandbox plane of an authorized request.
func (c *Control) envdMux() *http.ServeMux {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithInterceptors(errorInterceptor{c})}
	path, h := processpbconnect.NewProcessHandler(&processService{c: c}, opts...)
	mux.Handle(path, h)
	path, h = filesystempbconnect.NewFilesystemHandler(c.fs, opts...)
	mux.Handle(path, h)
	mux.HandleFunc("GET /health", c.adaptEnvd(c.health))
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
	return httpedge.Adapt(c.writeError, func(w http.ResponseWriter, r *http.Request) error {
		return h(w, r, targetOf(r.Context()))
	})
}

// health answers 204 while the sandbox runs, and 502 otherwise (what the SDKs read as
// "not running"); it does not resume a paused sandbox.
func (c *Control) health(w http.ResponseWriter, r *http.Request, t *target) error {
	if t.sb.State != manager.Running {
		writeJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway, Message: "sandbox " + t.id + " is " + string(t.sb.State)})
		return nil
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// envs answers the sandbox's environment variables, those it was created with.
func (c *Control) envs(w http.ResponseWriter, r *http.Request, t *target) error {
	out := t.sb.Env
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
	code := errdefs.Code(err)
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
		cc, msg = connect.CodeInternal, c.internal("envd call failed", err, "procedure", procedure)
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
