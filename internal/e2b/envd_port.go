package e2b

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/airlockhq/airlock/internal/portproxy"
)

// proxyPort passes a request for a port other than envd's to that port on the
// sandbox's loopback, upgrades (WebSocket) included, with the Host the caller used (as
// E2B does). The plane's own headers, the access tokens and API key among them, are
// removed first: the sandbox never sees them.
func (c *Control) proxyPort(w http.ResponseWriter, r *http.Request, t *target, port int) {
	c.ports.Serve(w, r, portproxy.Target{SandboxID: t.id, Port: port,
		Dial:  func(ctx context.Context) (net.Conn, error) { return t.wk.DialPort(ctx, port) },
		Touch: func() { c.m.Touch(t.id) },
		Strip: []string{hdrAccessToken, hdrTrafficToken, hdrSandboxID, hdrSandboxPort, "X-API-Key"},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = r.Host
		},
		Failed: func(w http.ResponseWriter, err error) {
			c.log.Debug("port did not answer", "sandbox", t.id, "port", port, "err", err)
			writeJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway,
				Message: "nothing answered on port " + strconv.Itoa(port) + " of sandbox " + t.id + ": is a server listening there?"})
		},
	})
}
