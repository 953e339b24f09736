package e2b

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
)

// proxyPort passes a request for a port other than envd's to that port on the
// sandbox's loopback, upgrades (WebSocket) included. The plane's own headers, the
// access tokens among them, are removed first: the sandbox never sees them.
func (c *Control) proxyPort(w http.ResponseWriter, r *http.Request, t *target, port int) {
	host := "127.0.0.1:" + strconv.Itoa(port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", host, r.Host
			for _, h := range []string{hdrAccessToken, hdrTrafficToken, hdrSandboxID, hdrSandboxPort} {
				pr.Out.Header.Del(h)
			}
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return t.ag.DialPort(ctx, port)
			},
			DisableKeepAlives: true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway,
				Message: "port " + strconv.Itoa(port) + " of sandbox " + t.id + " did not answer"})
		},
	}
	rp.ServeHTTP(w, r)
}
