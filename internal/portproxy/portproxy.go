// Package portproxy forwards HTTP requests, upgrades (WebSocket) included, to a TCP
// port inside a sandbox, and keeps every connection it opens so that closing the port,
// or the sandbox going away, cuts them. Airlock's exposed ports and the E2B-compatible
// plane's ports both go through it.
//
// It knows nothing of sandboxes beyond an id and a dialler: it imports no other
// Airlock package.
package portproxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
)

// Target is one request's way into a sandbox's port.
type Target struct {
	SandboxID string
	Port      int
	// Dial connects to the port (to the sandbox's loopback, so a server bound to
	// 127.0.0.1 is reached too).
	Dial func(ctx context.Context) (net.Conn, error)
	// Touch, if set, is called on every read from the port: traffic that keeps the
	// sandbox from idling out.
	Touch func()
	// Strip lists request headers the sandbox must not see (credentials of the node's
	// own planes).
	Strip []string
	// Rewrite, if set, changes the outgoing request further (its path, its query, its
	// Host, which is the port's address unless Rewrite says otherwise).
	Rewrite func(*httputil.ProxyRequest)
	// Failed answers a request the port did not answer.
	Failed func(w http.ResponseWriter, err error)
}

// Proxy forwards requests to sandboxes' ports and tracks their connections.
type Proxy struct {
	mu    sync.Mutex
	conns map[key]map[*conn]bool
	tr    *http.Transport
}

type key struct {
	sandbox string
	port    int
}

type dialKey struct{}

// New returns a Proxy.
func New() *Proxy {
	p := &Proxy{conns: map[key]map[*conn]bool{}}
	// One transport for every target; it keeps no connection alive, since a kept
	// connection would be another sandbox's the next time the same address came up.
	p.tr = &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t := ctx.Value(dialKey{}).(*Target)
			c, err := t.Dial(ctx)
			if err != nil {
				return nil, err
			}
			return p.track(t, c), nil
		},
	}
	return p
}

// Serve forwards r to t's port and writes the answer to w.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, t Target) {
	dest := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(t.Port)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(dest)
			for _, h := range t.Strip {
				pr.Out.Header.Del(h)
			}
			if t.Rewrite != nil {
				t.Rewrite(pr)
			}
		},
		Transport: p.tr,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			t.Failed(w, err)
		},
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), dialKey{}, &t)))
}

// CloseAll cuts every open connection to a sandbox's port.
func (p *Proxy) CloseAll(sandboxID string, port int) {
	k := key{sandboxID, port}
	p.mu.Lock()
	conns := p.conns[k]
	delete(p.conns, k)
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

func (p *Proxy) track(t *Target, c net.Conn) *conn {
	tc := &conn{Conn: c, touch: t.Touch}
	k := key{t.SandboxID, t.Port}
	tc.done = func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.conns[k], tc)
		if len(p.conns[k]) == 0 {
			delete(p.conns, k)
		}
	}
	p.mu.Lock()
	if p.conns[k] == nil {
		p.conns[k] = map[*conn]bool{}
	}
	p.conns[k][tc] = true
	p.mu.Unlock()
	return tc
}

// conn removes itself from its proxy on close and counts reads as activity.
type conn struct {
	net.Conn
	once  sync.Once
	done  func()
	touch func()
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.touch != nil {
		c.touch()
	}
	return n, err
}

func (c *conn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}
