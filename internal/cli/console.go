package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"
)

var consoleVerb = &verb{
	name:  "console",
	args:  "[--listen 127.0.0.1:PORT]",
	short: "serve the daemon's web console on a local port and print its URL",
	long: `The web console is served by the daemon at / of its TCP listener (--listen of airlock
serve). This command makes it reachable from the unix socket too: it listens on a port
of 127.0.0.1 (--listen; default any free port), passes the console's pages to the
socket, and prints the URL to open. Sign in there with an API token (airlock token
create): the console acts with that token's identity, never with this command's.
Only the console's paths pass: the API (/v1) is not served on the local port, so
other users of this machine cannot use it as yours. With --addr, it prints the
console's URL on the daemon's TCP listener instead. It runs until interrupted.`,
	run: runConsole,
}

func runConsole(c *cmd, args []string) error {
	listen := c.fs.String("listen", "127.0.0.1:0", "local `host:port` to serve the console on (loopback only)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if !cl.Local() {
		target := c.addr
		if !strings.Contains(target, "://") {
			target = "http://" + target
		}
		fmt.Fprintln(c.stdout, strings.TrimSuffix(target, "/")+"/")
		return nil
	}
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return usagef("--listen %q: a loopback address and port, such as 127.0.0.1:8080", *listen)
	}
	if _, err := cl.Status(c.ctx); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	sock := cl.Target()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "airlock"
			// The Host stays the local one: the console checks the page's Origin against it.
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
		FlushInterval: -1,
	}
	hs := &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !consolePath(r.URL.Path) {
			// Over the socket the daemon knows the caller by uid: never lend it.
			http.Error(w, "the API is not served here: only the console's pages are", http.StatusNotFound)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	fmt.Fprintf(c.stdout, "http://%s/\n", l.Addr())
	fmt.Fprintln(c.stderr, "serving the console of", sock, "until interrupted")
	go func() {
		<-c.ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// consolePath reports whether path is one of the console's own (its page, assets and
// calls, which carry the viewer's session): the only paths airlock console passes to
// the socket. Everything else the daemon serves there (/v1, /metrics, and whatever
// comes next) would answer as this command's user.
func consolePath(path string) bool {
	if strings.Contains(path, "/..") || strings.Contains(path, "//") {
		return false
	}
	return path == "/" || strings.HasPrefix(path, "/assets/") || strings.HasPrefix(path, "/console/")
}
