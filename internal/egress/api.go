package egress

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// apiAddr is what the node's DNS answers for APIHost. Any address will do: the kernel
// sends a sandbox's TCP to ports 80 and 443 to the proxy whatever the destination, and
// the proxy knows APIHost by its name (Host header, SNI, CONNECT target). TEST-NET-1
// (RFC 5737) is never a real host.
var apiAddr = netip.MustParseAddr("192.0.2.1")

// hopHeaders are the hop-by-hop headers (RFC 9110, 7.6.1) a proxy does not pass on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// serveAPI serves a request to APIHost, which the sandbox's policy does not decide, in
// the proxy's own process with Config.API: nothing is dialled. The sandbox's session
// placeholder ("Bearer PH" in Authorization) becomes a real token from
// Config.SessionToken; any other Authorization goes as it is, for the API to judge.
// Hop-by-hop and forwarding headers are dropped. The request makes one record (rule
// "airlock-api"); the token is in no record and no log.
func (p *Proxy) serveAPI(w http.ResponseWriter, r *http.Request, sb SandboxInfo, rec Record) {
	if p.cfg.API == nil {
		rec.Reason = "the Airlock API is not served through this node's proxy"
		p.refuse(w, rec, denied("%s refused: %s", APIHost, rec.Reason))
		return
	}
	out := r.Clone(r.Context())
	stripHopHeaders(out.Header)
	if err := p.swapSession(out.Header, sb); err != nil {
		rec.Reason = errdefs.Message(err)
		p.cfg.Audit(rec)
		p.writeErrorStatus(w, err, http.StatusServiceUnavailable)
		return
	}
	u := *r.URL
	u.Scheme, u.Host, u.User, u.Opaque = "", "", nil, ""
	out.URL, out.RequestURI, out.Host = &u, u.RequestURI(), APIHost
	up := &countReader{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = up
	}
	down := &countWriter{ResponseWriter: w}
	p.cfg.API(down, out, sb)
	rec.BytesUp, rec.BytesDown, rec.Allowed = up.n.Load(), down.n, true
	p.cfg.Audit(rec)
}

// swapSession replaces the sandbox's session placeholder in h's Authorization with a
// session token.
func (p *Proxy) swapSession(h http.Header, sb SandboxInfo) error {
	if sb.SessionPlaceholder == "" {
		return nil
	}
	const scheme = "Bearer "
	auth := h["Authorization"]
	token := ""
	for i, v := range auth {
		v = strings.TrimSpace(v)
		if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) ||
			strings.TrimSpace(v[len(scheme):]) != sb.SessionPlaceholder {
			continue
		}
		if token == "" {
			if p.cfg.SessionToken == nil {
				return errdefs.Unavailable("no session token for the sandbox: this node issues none")
			}
			t, err := p.cfg.SessionToken(sb)
			if err != nil {
				return errdefs.Unavailable("no session token for the sandbox: %s", errdefs.Message(err))
			}
			token = t
		}
		auth[i] = scheme + token
	}
	return nil
}

// stripHopHeaders removes from h the hop-by-hop headers, those Connection names, and
// the forwarding headers a client might send to pass for someone else.
func stripHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if k := http.CanonicalHeaderKey(name); k == "Forwarded" || strings.HasPrefix(k, "X-Forwarded-") {
			delete(h, name)
		}
	}
}
