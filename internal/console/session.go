package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie: HttpOnly, SameSite=Strict, Path=/.
const cookieName = "airlock_console"

// csrfHeader carries the session's CSRF token on every state-changing call.
const csrfHeader = "X-Airlock-CSRF"

// session is one sign-in: the viewer's token, kept on the server only, bound to the
// random id in the cookie (kept hashed) and to a CSRF token the page reads once.
type session struct {
	token   string
	csrf    string
	expires time.Time
	created time.Time
}

type sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]*session // by the cookie's sha256
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, now: time.Now, m: map[[32]byte]*session{}}
}

func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// maxPerToken bounds the sessions of one token: its oldest goes first, so that one
// viewer signing in again and again pushes out only its own.
const maxPerToken = 16

// errFull is a sign-in refused because the console keeps as many sessions as it may.
var errFull = errors.New("the console keeps as many sessions as it may: sign in again later")

// add keeps a new session of token and returns its cookie value.
func (s *sessions) add(token string) (string, *session, error) {
	id := randomToken()
	now := s.now()
	ss := &session{token: token, csrf: randomToken(), created: now, expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	var mine [][32]byte // this token's sessions
	for k, v := range s.m {
		switch {
		case !now.Before(v.expires):
			delete(s.m, k)
		case subtle.ConstantTimeCompare([]byte(v.token), []byte(token)) == 1:
			mine = append(mine, k)
		}
	}
	for len(mine) >= maxPerToken {
		oldest := 0
		for i, k := range mine {
			if s.m[k].created.Before(s.m[mine[oldest]].created) {
				oldest = i
			}
		}
		delete(s.m, mine[oldest])
		mine = append(mine[:oldest], mine[oldest+1:]...)
	}
	if len(s.m) >= s.max {
		return "", nil, errFull
	}
	s.m[sha256.Sum256([]byte(id))] = ss
	return id, ss, nil
}

// get is the live session of r's cookie, if any.
func (s *sessions) get(r *http.Request) (*session, [32]byte) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil, [32]byte{}
	}
	key := sha256.Sum256([]byte(ck.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[key]
	if ss == nil {
		return nil, key
	}
	if !s.now().Before(ss.expires) {
		delete(s.m, key)
		return nil, key
	}
	return ss, key
}

func (s *sessions) remove(key [32]byte) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// sameOrigin refuses a request whose Origin (browsers send it on every POST, PUT,
// DELETE and WebSocket) is another site's.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not from a browser's cross-site call: those always carry Origin
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
}

// checkCSRF refuses a state-changing call of ss without its CSRF header or from
// another origin.
func checkCSRF(r *http.Request, ss *session) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	got := r.Header.Get(csrfHeader)
	return sameOrigin(r) && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

type signInRequest struct {
	Token string `json:"token"`
}

type sessionAnswer struct {
	CSRF    string          `json:"csrf"`
	Expires time.Time       `json:"expires"`
	WhoAmI  json.RawMessage `json:"whoami"`
}

// signIn checks a token with GET /v1/whoami and, if the API accepts it, starts a
// session: the token stays on the server, the browser gets an HttpOnly cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "permission_denied", "sign-in from another site is refused")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusBadRequest, "invalid_argument", "sign in with a JSON body {\"token\": \"...\"} and Content-Type: application/json")
		return
	}
	var req signInRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 8<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Token == "" {
		writeError(w, http.StatusBadRequest, "invalid_argument", "sign in with a JSON body {\"token\": \"...\"}: the token is an API token (airlock token create)")
		return
	}
	who, _ := c.viewer(w, r, req.Token)
	if who == nil {
		return
	}
	id, ss, err := c.sessions.add(req.Token)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", MaxAge: int(c.opts.SessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, sessionAnswer{CSRF: ss.csrf, Expires: ss.expires, WhoAmI: who})
}

// whoami answers the session's CSRF token and the viewer (read fresh from the API:
// a revoked token ends the session).
func (c *Console) whoami(w http.ResponseWriter, r *http.Request) {
	ss, key := c.sessions.get(r)
	if ss == nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", "sign in with a token")
		return
	}
	who, status := c.viewer(w, r, ss.token)
	if status == http.StatusUnauthorized {
		c.sessions.remove(key) // the token was revoked or expired
	}
	if who == nil {
		return
	}
	writeJSON(w, http.StatusOK, sessionAnswer{CSRF: ss.csrf, Expires: ss.expires, WhoAmI: who})
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	ss, key := c.sessions.get(r)
	if ss != nil && !checkCSRF(r, ss) {
		writeError(w, http.StatusForbidden, "permission_denied", "signing out needs the "+csrfHeader+" header of the session")
		return
	}
	c.sessions.remove(key)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

// viewer returns the API's WhoAmI of token, or answers the API's refusal (or that it
// could not be reached) itself and returns nil, with the API's status.
func (c *Console) viewer(w http.ResponseWriter, r *http.Request, token string) ([]byte, int) {
	who, status, err := c.whoamiOf(r, token)
	if err != nil {
		writeError(w, http.StatusBadGateway, "unavailable", "the API could not be reached: "+err.Error())
		return nil, 0
	}
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(who)
		return nil, status
	}
	return who, status
}

// whoamiOf calls GET /v1/whoami with token and returns the answer's body and status.
func (c *Console) whoamiOf(r *http.Request, token string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(viewerContext(r), http.MethodGet, "http://console/v1/whoami", nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return b, resp.StatusCode, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers in the API's error shape.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}
