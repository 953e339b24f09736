package egress

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// A brokered secret never enters its sandbox: the sandbox holds a placeholder, and the
// proxy puts the value in place of it only in a request it forwards to one of the
// secret's hosts, in the headers (Basic credentials decoded and encoded again) and, if
// the secret says so, in the query string. A placeholder anywhere else it can see (the
// path, the query of a secret without Query, a request to another host) refuses the
// request: it is never substituted there. Bodies are neither looked at nor changed. The
// value is opened for each request and lives only in the outgoing copy of it.

// openSecret is a secret a request carries to one of its hosts, with its value opened
// for that request.
type openSecret struct {
	sub   *Substitution
	value string
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

// where is the set of places in a request a placeholder was seen.
type where uint8

const (
	inHeader where = 1 << iota // a header value, or Basic credentials
	inQuery
	inPath
)

// openSecrets finds the placeholders of subs in r, a request bound for host, and opens
// the value of each one it may substitute there; a value is never put in a plain http
// request (tls false), where it would cross the network in the clear. refusal, if not empty, says why the
// request must be refused instead; names are the secrets concerned (those refused, or
// else those to substitute), for the record.
func openSecrets(r *http.Request, subs []Substitution, host string, tls bool) (open []openSecret, names []string, refusal string) {
	if len(subs) == 0 {
		return nil, nil, ""
	}
	basic := basicCredentials(r.Header)
	var found []*Substitution
	var refused []string
	for i := range subs {
		s := &subs[i]
		if s.Placeholder == "" {
			continue
		}
		at := placesOf(r, basic, s.Placeholder)
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
		case !tls:
			why = fmt.Sprintf("placeholder of secret %q in a plain http request; secrets are substituted over https only", s.Secret)
		default:
			found = append(found, s)
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
	for _, s := range found {
		names = append(names, s.Secret)
	}
	for _, s := range found {
		if s.Value == nil {
			return nil, []string{s.Secret}, fmt.Sprintf("secret %q has no value to deliver", s.Secret)
		}
		v, err := s.Value()
		if err != nil {
			return nil, []string{s.Secret}, fmt.Sprintf("secret %q is unavailable (%s); its placeholder was not substituted",
				s.Secret, errdefs.Message(err))
		}
		open = append(open, openSecret{sub: s, value: string(v)})
	}
	return open, names, ""
}

// placesOf says where in r (its header values, decoded Basic credentials, query and
// path) the placeholder ph appears.
func placesOf(r *http.Request, basic []string, ph string) where {
	var at where
headers:
	for _, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, ph) {
				at |= inHeader
				break headers
			}
		}
	}
	for _, c := range basic {
		if strings.Contains(c, ph) {
			at |= inHeader
		}
	}
	if strings.Contains(r.URL.RawQuery, ph) {
		at |= inQuery
	}
	if strings.Contains(r.URL.Path, ph) || strings.Contains(r.URL.RawPath, ph) {
		at |= inPath
	}
	return at
}

// applySecrets puts the opened values in place of their placeholders in out, the
// outgoing copy of a request openSecrets allowed.
func applySecrets(out *http.Request, open []openSecret) {
	for _, vs := range out.Header {
		for i, v := range vs {
			for _, o := range open {
				v = strings.ReplaceAll(v, o.sub.Placeholder, o.value)
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
			cred = strings.ReplaceAll(cred, o.sub.Placeholder, o.value)
		}
		if cred != string(dec) {
			auth[i] = "Basic " + base64.StdEncoding.EncodeToString([]byte(cred))
		}
	}
	for _, o := range open {
		if o.sub.Query {
			out.URL.RawQuery = strings.ReplaceAll(out.URL.RawQuery, o.sub.Placeholder, url.QueryEscape(o.value))
		}
	}
}

// redact replaces the opened values in s (a message about the request) with the
// secrets' names.
func redact(s string, open []openSecret) string {
	for _, o := range open {
		if o.value == "" {
			continue
		}
		name := "[secret " + o.sub.Secret + "]"
		s = strings.ReplaceAll(s, o.value, name)
		s = strings.ReplaceAll(s, url.QueryEscape(o.value), name)
	}
	return s
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
