package egress

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// A brokered secret never enters its sandbox: the sandbox holds a placeholder, and the
// proxy puts the value in place of it only in a request it forwards to one of the
// secret's hosts, in the headers its binding names (Authorization by default, Basic
// credentials decoded and encoded again) and, if the secret says so, in the query
// string. A placeholder anywhere else it can see (another header, the path, the query
// of a secret without Query, a request to another host) refuses the request: it is
// never substituted there. Bodies are neither looked at nor changed. The value is opened
// for each request and lives only in the outgoing copy of it, and is taken out of the
// answer again (redact.go).

// openSecret is a secret of the host a request goes to, with its value opened for that
// request: to substitute, if the request carries its placeholder, and in any case to
// redact from the answer.
type openSecret struct {
	sub        *Substitution
	value      string
	substitute bool
}

// forHost reports whether host (canonical) is one of s's hosts: equal to one, or a
// subdomain of a wildcard "*.example.com".
func (s *Substitution) forHost(host string) bool {
	for _, pattern := range s.Hosts {
		p := strings.ToLower(strings.TrimSuffix(pattern, "."))
		if base, ok := strings.CutPrefix(p, "*."); ok {
			if base != "" && len(host) > len(base)+1 && strings.HasSuffix(host, base) && host[len(host)-len(base)-1] == '.' {
				return true
			}
		} else if p == host {
			return true
		}
	}
	return false
}

// headers are the canonical names of the headers s is substituted in.
func (s *Substitution) headers() []string {
	if len(s.Headers) == 0 {
		return []string{"Authorization"}
	}
	out := make([]string, len(s.Headers))
	for i, h := range s.Headers {
		out[i] = http.CanonicalHeaderKey(h)
	}
	return out
}

// inHeader reports whether s is substituted in the header name (canonical).
func (s *Substitution) inHeader(name string) bool {
	if len(s.Headers) == 0 {
		return name == "Authorization"
	}
	return slices.ContainsFunc(s.Headers, func(h string) bool { return strings.EqualFold(h, name) })
}

// maxSubstitutionHeaders bounds the headers one binding may name.
const maxSubstitutionHeaders = 16

// SubstitutionHeaders checks the header names a binding substitutes its secret in and
// returns them canonical, without repeats: each a header name (RFC 9110 token, at
// most 128 bytes) the proxy passes on as it is, so not a hop-by-hop or forwarding
// header, Host or Content-Length. None means Authorization.
func SubstitutionHeaders(names []string) ([]string, error) {
	if len(names) > maxSubstitutionHeaders {
		return nil, errdefs.Invalid("%d headers named; a binding substitutes in at most %d", len(names), maxSubstitutionHeaders)
	}
	var out []string
	for _, n := range names {
		if n == "" || len(n) > 128 || strings.IndexFunc(n, func(c rune) bool { return !isTokenChar(c) }) >= 0 {
			return nil, errdefs.Invalid("invalid header name %q: letters, digits and !#$%%&'*+-.^_`|~, at most 128 bytes", n)
		}
		c := http.CanonicalHeaderKey(n)
		if slices.Contains(hopHeaders, c) || c == "Host" || c == "Content-Length" || c == "Forwarded" || strings.HasPrefix(c, "X-Forwarded-") {
			return nil, errdefs.Invalid("a secret is never substituted in the %s header: the proxy sets or drops it", c)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// isTokenChar reports whether c may be in an HTTP token (RFC 9110, 5.6.2).
func isTokenChar(c rune) bool {
	return c < 0x7f && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c))
}

// where is the set of places in a request a placeholder was seen.
type where uint8

const (
	inHeader where = 1 << iota // a header value, or Basic credentials
	inQuery
	inPath
)

// openSecrets finds the placeholders of subs in r, a request bound for host, and opens
// the value of each secret of host: those whose placeholder r carries, to substitute,
// and the others to redact from the answer (one that fails to open is then left out).
// A value is never put in a plain http request (tls false), where it would cross the
// network in the clear. refusal, if not empty, says why the request must be refused
// instead, and nothing is opened; names are the secrets concerned (those refused, or
// else those to substitute), for the record.
func openSecrets(r *http.Request, subs []Substitution, host string, tls bool) (open []openSecret, names []string, refusal string) {
	if len(subs) == 0 {
		return nil, nil, ""
	}
	basic := basicCredentials(r.Header)
	found := make([]bool, len(subs))
	var refused []string
	for i := range subs {
		s := &subs[i]
		if s.Placeholder == "" {
			continue
		}
		at, header := placesOf(r, basic, s)
		if at == 0 {
			continue
		}
		var why string
		switch {
		case !s.forHost(host):
			why = fmt.Sprintf("placeholder of secret %q sent to %s, not one of its allowed hosts", s.Secret, host)
		case at&inPath != 0:
			why = fmt.Sprintf("placeholder of secret %q in the URL path, where it is never substituted", s.Secret)
		case at&inQuery != 0 && !s.Query:
			why = fmt.Sprintf("placeholder of secret %q in the query string, where this secret is not substituted", s.Secret)
		case header != "":
			why = fmt.Sprintf("placeholder of secret %q in the %s header, where this secret is not substituted (its binding names %s)",
				s.Secret, header, strings.Join(s.headers(), ", "))
		case !tls:
			why = fmt.Sprintf("placeholder of secret %q in a plain http request; secrets are substituted over https only", s.Secret)
		default:
			found[i] = true
			names = append(names, s.Secret)
			continue
		}
		if refusal == "" {
			refusal = why
		}
		refused = append(refused, s.Secret)
	}
	if refusal != "" {
		return nil, refused, refusal
	}
	for i := range subs {
		s := &subs[i]
		if !found[i] && !s.forHost(host) {
			continue
		}
		var v []byte
		var err error = errdefs.Unavailable("no value to deliver")
		if s.Value != nil {
			v, err = s.Value()
		}
		switch {
		case err == nil:
			open = append(open, openSecret{sub: s, value: string(v), substitute: found[i]})
		case !found[i]:
			// Not substituted here: nothing to take out of the answer but what an
			// earlier request sent, which no longer opens.
		case s.Value == nil:
			return nil, []string{s.Secret}, fmt.Sprintf("secret %q has no value to deliver", s.Secret)
		default:
			return nil, []string{s.Secret}, fmt.Sprintf("secret %q is unavailable (%s); its placeholder was not substituted",
				s.Secret, errdefs.Message(err))
		}
	}
	return open, names, ""
}

// placesOf says where in r (its header values, decoded Basic credentials, query and
// path) the placeholder of s appears, and the first header (by name) it is in that s
// is not substituted in.
func placesOf(r *http.Request, basic []string, s *Substitution) (at where, header string) {
	ph := s.Placeholder
	note := func(name string) {
		at |= inHeader
		if !s.inHeader(name) && (header == "" || name < header) {
			header = name
		}
	}
	for name, vs := range r.Header {
		if slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, ph) }) {
			note(http.CanonicalHeaderKey(name))
		}
	}
	if slices.ContainsFunc(basic, func(c string) bool { return strings.Contains(c, ph) }) {
		note("Authorization")
	}
	if strings.Contains(r.URL.RawQuery, ph) {
		at |= inQuery
	}
	if strings.Contains(r.URL.Path, ph) || strings.Contains(r.URL.RawPath, ph) {
		at |= inPath
	}
	return at, header
}

// applySecrets puts the opened values in place of their placeholders in out, the
// outgoing copy of a request openSecrets allowed, and returns the Basic credentials
// (base64, as sent) it put a value in.
func applySecrets(out *http.Request, open []openSecret) (basics []string) {
	for name, vs := range out.Header {
		name = http.CanonicalHeaderKey(name)
		for i, v := range vs {
			for _, o := range open {
				if o.substitute && o.sub.inHeader(name) {
					v = strings.ReplaceAll(v, o.sub.Placeholder, o.value)
				}
			}
			vs[i] = v
		}
	}
	auth := out.Header["Authorization"]
	for i, v := range auth {
		enc, ok := cutBasic(v)
		if !ok {
			continue
		}
		dec, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			continue
		}
		cred := string(dec)
		for _, o := range open {
			if o.substitute && o.sub.inHeader("Authorization") {
				cred = strings.ReplaceAll(cred, o.sub.Placeholder, o.value)
			}
		}
		if cred != string(dec) {
			enc := base64.StdEncoding.EncodeToString([]byte(cred))
			auth[i] = "Basic " + enc
			basics = append(basics, enc)
		}
	}
	for _, o := range open {
		if o.substitute && o.sub.Query {
			out.URL.RawQuery = strings.ReplaceAll(out.URL.RawQuery, o.sub.Placeholder, url.QueryEscape(o.value))
		}
	}
	return basics
}

// basicCredentials returns the decoded "user:password" of each Basic Authorization
// header of h; one that does not decode is left out (and so never substituted into).
func basicCredentials(h http.Header) []string {
	var out []string
	for _, v := range h["Authorization"] {
		if enc, ok := cutBasic(v); ok {
			if dec, err := base64.StdEncoding.DecodeString(enc); err == nil {
				out = append(out, string(dec))
			}
		}
	}
	return out
}

// cutBasic returns the base64 credentials of a Basic Authorization value.
func cutBasic(v string) (string, bool) {
	const scheme = "Basic "
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	return strings.TrimSpace(v[len(scheme):]), true
}
