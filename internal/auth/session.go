package auth

import (
	"context"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// SessionPrefix starts a sandbox's session token, which only the egress proxy holds:
// it swaps it for the placeholder in the sandbox's requests to the API.
const SessionPrefix = "al_s_"

// SessionTTL is how long a session token is valid; the proxy is given a fresh one
// once half of it has passed, so a request never carries one about to expire.
const SessionTTL = 15 * time.Minute

// session is one sandbox session token: whose, acting with which role, from where.
type session struct {
	identity string
	role     string // "": the identity's roles
	sandbox  string
	expires  time.Time
}

// SessionToken returns the token the proxy swaps in for a sandbox's placeholder: a
// short-lived token of the sandbox's owner, acting with role (when the sandbox was
// created with one), valid only in requests from that sandbox. It is minted on first
// use and again once half its lifetime has passed; the older stays valid until it
// expires, for the requests already under way.
func (s *Service) SessionToken(ctx context.Context, owner, role, sandbox string) (string, error) {
	now := s.now()
	s.mu.Lock()
	if tok, ok := s.current[sandbox]; ok {
		if se := s.sessions[hashToken(tok)]; se != nil && se.identity == owner && se.role == role && se.expires.Sub(now) > SessionTTL/2 {
			s.mu.Unlock()
			return tok, nil
		}
	}
	s.mu.Unlock()
	if _, err := s.st.GetIdentity(ctx, owner); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return "", unauthenticated("the sandbox's owner " + owner + " no longer exists")
		}
		return "", err
	}
	tok := SessionPrefix + randomString(32)
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, se := range s.sessions {
		if !now.Before(se.expires) {
			delete(s.sessions, h)
		}
	}
	s.sessions[hashToken(tok)] = &session{identity: owner, role: role, sandbox: sandbox, expires: now.Add(SessionTTL)}
	s.current[sandbox] = tok
	return tok, nil
}

// AuthenticateSession returns the principal of a session token in a request that came
// from sandbox through the proxy: the owner, with the sandbox's role if it has one.
func (s *Service) AuthenticateSession(ctx context.Context, token, sandbox string) (*Principal, error) {
	bad := unauthenticated("the session token is not valid (wrong or expired)")
	s.mu.Lock()
	se, ok := s.sessions[hashToken(token)]
	s.mu.Unlock()
	switch {
	case !ok || !s.now().Before(se.expires):
		return nil, bad
	case se.sandbox != sandbox:
		return nil, unauthenticated("the session token belongs to another sandbox")
	}
	var as []string
	if se.role != "" {
		as = []string{se.role}
	}
	p, err := s.principalAs(ctx, se.identity, as)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unauthenticated("the sandbox's owner " + se.identity + " no longer exists")
	}
	if err != nil {
		return nil, err
	}
	p.Sandbox = sandbox
	return p, nil
}

// EndSessions invalidates a sandbox's session tokens (it stopped or was deleted).
func (s *Service) EndSessions(sandbox string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.current, sandbox)
	for h, se := range s.sessions {
		if se.sandbox == sandbox {
			delete(s.sessions, h)
		}
	}
}
