package console

import (
	"context"
	"net/http"
	"net/http/httputil"
	"strings"
)

// apiPolicy is the Content-Security-Policy of every API answer passed to the page: it
// never renders as a document of the console's origin (a file a sandbox wrote, opened
// by itself, runs nothing).
const apiPolicy = "default-src 'none'; sandbox; frame-ancestors 'none'"

// viewerContext carries r's remote address to the in-memory connection, for the audit.
func viewerContext(r *http.Request) context.Context {
	return context.WithValue(r.Context(), viewerAddrKey{}, r.RemoteAddr)
}

// sandboxRoute is the route under one sandbox that path names ("files" for
// /v1/sandboxes/{ref}/files), or "".
func sandboxRoute(path string) string {
	p := strings.Split(path, "/")
	if len(p) == 5 && p[1] == "v1" && p[2] == "sandboxes" {
		return p[4]
	}
	return ""
}

// proxy passes /console/v1/... to the API's /v1/... as the session's viewer: with its
// token, without the cookie, after the CSRF check of a state-changing call.
func (c *Console) proxy(w http.ResponseWriter, r *http.Request) {
	ss, _ := c.sessions.get(r)
	if ss == nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", "the console session is missing or expired: sign in again")
		return
	}
	if !checkCSRF(r, ss) {
		writeError(w, http.StatusForbidden, "permission_denied", "a change made from the console needs the "+csrfHeader+" header of its session, from its own origin")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/console")
	if strings.HasPrefix(path, "/v1/ports/") || sandboxRoute(path) == "pty" {
		// An exposed port serves what the sandbox wrote, and a terminal is the
		// console's own socket (/console/pty): neither on this origin.
		writeError(w, http.StatusNotFound, "not_found", "not served through the console: "+path)
		return
	}
	files := r.Method == http.MethodGet && sandboxRoute(path) == "files"
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out = pr.Out.WithContext(viewerContext(r))
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "console", "console"
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Del(csrfHeader)
			pr.Out.Header.Del("Origin")
			pr.Out.Header.Del("Referer")
			pr.Out.Header.Set("Authorization", "Bearer "+ss.token)
		},
		Transport:     c.hc.Transport,
		FlushInterval: -1, // streams (events, logs, usage) pass as they come
		ModifyResponse: func(resp *http.Response) error {
			h := resp.Header
			h.Set("Content-Security-Policy", apiPolicy)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Del("Set-Cookie")
			if files && resp.StatusCode/100 == 2 {
				h.Set("Content-Type", "application/octet-stream")
				h.Set("Content-Disposition", "attachment")
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, "unavailable", "the API could not be reached: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}
