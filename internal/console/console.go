// Package console serves Airlock's web console: a single page, its scripts and styles
// (embedded in the binary; nothing is fetched from elsewhere at run time), and the
// sign-in that turns a token into a session cookie. It is a client of the public API
// like any other: every call the page makes goes to /v1 over an in-memory connection,
// with the signed-in viewer's own token, through the same authentication, permission
// checks and audit as a call from the CLI. It imports nothing of the daemon's internals
// (no manager, store or server): there is no way around the API from here.
//
// Hostile input it guards against: everything a sandbox wrote (names, file names, log
// lines, egress hosts) reaches the page as JSON and is put in the DOM as text; the page
// runs under a strict Content-Security-Policy (no inline script or style, no eval);
// files a sandbox wrote are served as attachments that never render on the console's
// origin; every state-changing call made with the session's cookie needs the session's
// CSRF header, and the cookie is HttpOnly and SameSite=Strict.
package console

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// Options configure the console.
type Options struct {
	// API is the daemon's API handler: the console calls it as a client, with the
	// viewer's token.
	API http.Handler
	// SessionTTL is how long a sign-in lasts (0: DefaultSessionTTL).
	SessionTTL time.Duration
	// MaxSessions bounds the sessions kept at once (0: DefaultMaxSessions); a sign-in
	// past it is refused. One token keeps at most 16: its oldest goes first.
	MaxSessions int
	Log         *slog.Logger
}

const (
	// DefaultSessionTTL is how long a sign-in lasts.
	DefaultSessionTTL = 8 * time.Hour
	// DefaultMaxSessions bounds the sessions kept at once.
	DefaultMaxSessions = 10000
)

// Console is the web console's handler.
type Console struct {
	opts     Options
	log      *slog.Logger
	mux      *http.ServeMux
	sessions *sessions
	pipe     *pipeListener
	apiSrv   *http.Server
	hc       *http.Client
	wg       sync.WaitGroup
}

// New builds the console over opts.API. Close ends its in-memory API connections.
func New(opts Options) *Console {
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	c := &Console{opts: opts, log: opts.Log.With("component", "console"), mux: http.NewServeMux(),
		sessions: newSessions(opts.SessionTTL, opts.MaxSessions), pipe: newPipeListener()}
	// The API is served to the console over in-memory connections that carry no peer
	// credentials: every call needs the viewer's token, as over TCP.
	c.apiSrv = &http.Server{Handler: opts.API, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.apiSrv.Serve(c.pipe)
	}()
	c.hc = &http.Client{Transport: &http.Transport{DialContext: c.pipe.DialContext, DisableKeepAlives: true,
		DisableCompression: true}}
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServer(http.FS(static))
	c.mux.Handle("GET /assets/", securePage(http.StripPrefix("/assets/", files)))
	c.mux.Handle("GET /{$}", securePage(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})))
	c.mux.HandleFunc("POST /console/session", c.signIn)
	c.mux.HandleFunc("GET /console/session", c.whoami)
	c.mux.HandleFunc("DELETE /console/session", c.signOut)
	c.mux.HandleFunc("/console/v1/", c.proxy)
	c.mux.HandleFunc("GET /console/pty/{ref}", c.terminal)
	c.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such page: "+r.URL.Path)
	})
	return c
}

// Close ends the console's in-memory API connections and waits for them.
func (c *Console) Close() error {
	err := c.apiSrv.Close()
	c.pipe.Close()
	c.wg.Wait()
	return err
}

// portPolicy is added to every answer of an exposed port on a listener that serves the
// console: what a sandbox serves there runs in an opaque origin of its own, so its
// scripts cannot read the console's pages or call the console with its viewer's
// cookie. (Scripts, forms, popups and downloads still work; the app's own cookies and
// storage do not: serve it from a host of its own for those.)
const portPolicy = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// Mount returns the handler of a listener: /v1 (and /metrics, the API's Prometheus
// series) goes to api, every other path to the console.
func Mount(api, console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/metrics" {
			if strings.HasPrefix(r.URL.Path, "/v1/ports/") {
				w.Header().Set("Content-Security-Policy", portPolicy)
				// What a sandbox serves never sees the viewer's session, nor sets one.
				r, w = withoutSession(r), portWriter{w}
			}
			api.ServeHTTP(w, r)
			return
		}
		console.ServeHTTP(w, r)
	})
}

// withoutSession is r without the console's session cookie (the browser sends it with
// every request to this origin, an exposed port's too); other cookies are kept.
func withoutSession(r *http.Request) *http.Request {
	cookies := r.Cookies()
	if !slices.ContainsFunc(cookies, func(c *http.Cookie) bool { return c.Name == cookieName }) {
		return r
	}
	r = r.Clone(r.Context())
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if c.Name != cookieName {
			r.AddCookie(c)
		}
	}
	return r
}

// portWriter passes an exposed port's answer but for a Set-Cookie of the console's
// session cookie, which would sign the viewer in as someone else (or out).
type portWriter struct{ http.ResponseWriter }

func (w portWriter) clean() {
	h := w.Header()
	sc := h.Values("Set-Cookie")
	kept := slices.DeleteFunc(slices.Clone(sc), setsSession)
	if len(kept) != len(sc) {
		h["Set-Cookie"] = kept
	}
}

// setsSession says whether the value of a Set-Cookie header sets the console's cookie.
func setsSession(v string) bool {
	name, _, _ := strings.Cut(v, "=")
	return strings.TrimSpace(name) == cookieName
}

func (w portWriter) WriteHeader(code int) { w.clean(); w.ResponseWriter.WriteHeader(code) }

func (w portWriter) Write(b []byte) (int, error) { w.clean(); return w.ResponseWriter.Write(b) }

func (w portWriter) Flush() { w.clean(); http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach what portWriter does not implement.
func (w portWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands an upgrade its connection; the answer's header, which the proxy then
// writes itself (101 Switching Protocols), still loses the session's Set-Cookie.
func (w portWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	return conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriter(&headFilter{w: brw.Writer})), nil
}

// headFilter drops the session's Set-Cookie lines from the HTTP header written through
// it, and passes the rest (and everything after the header) as it is.
type headFilter struct {
	w    *bufio.Writer
	head []byte
	done bool
}

func (f *headFilter) Write(b []byte) (int, error) {
	if f.done {
		n, err := f.w.Write(b)
		return n, errors.Join(err, f.w.Flush())
	}
	f.head = append(f.head, b...)
	end := bytes.Index(f.head, []byte("\r\n\r\n"))
	if end < 0 {
		if len(f.head) > 1<<20 {
			return 0, errors.New("an upgrade's header of more than 1 MiB")
		}
		return len(b), nil
	}
	f.done = true
	var out []byte
	for line := range strings.SplitSeq(string(f.head[:end+2]), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Set-Cookie") {
			if setsSession(v) {
				continue
			}
		}
		if line != "" {
			out = append(append(out, line...), "\r\n"...)
		}
	}
	out = append(append(out, "\r\n"...), f.head[end+4:]...)
	f.head = nil
	if _, err := f.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), f.w.Flush()
}

// ServeHTTP serves the console's pages and calls.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// pagePolicy is the Content-Security-Policy of the console's page and assets: only its
// own scripts, styles and connections; no inline script or style, no eval, no frames.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func securePage(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", pagePolicy)
		h.ServeHTTP(w, r)
	})
}

// pipeListener is a net.Listener of in-memory connections: the console's way to the
// API it serves beside.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr("console") }

type viewerAddrKey struct{}

// DialContext opens an in-memory connection to the API; its far end's RemoteAddr is
// the viewer's address, when the context carries it, so that the audit log names the
// browser's address.
func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	near, far := net.Pipe()
	remote, _ := ctx.Value(viewerAddrKey{}).(string)
	if remote == "" {
		remote = "console"
	}
	select {
	case l.conns <- addrConn{Conn: far, remote: pipeAddr(remote)}:
		return near, nil
	case <-l.done:
		near.Close()
		far.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		near.Close()
		far.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }
