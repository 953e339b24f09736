package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// TokenPrefix starts every API token, so a leaked one is easy to recognise.
const TokenPrefix = "al_"

// AdminTokenFile is the file, in the state directory, where the first start writes the
// administrator's token (0600).
const AdminTokenFile = "admin.token"

// nameRE is compiled on first use: its bounded repetition makes a large program, and
// every airlock process (each CLI call) would otherwise pay for it at start.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) })

// NameRule says what an identity or role name may be.
const NameRule = "1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"

// Options configure the service.
type Options struct {
	// UnixUsers maps local uids to identities over the unix socket, before the
	// identities' own UIDs (default: root is the administrator, Admin).
	UnixUsers map[int]string
	// Admin is the name of the administrator the first start creates.
	Admin string
	Log   *slog.Logger
}

// Service authenticates callers and manages identities, roles and tokens.
type Service struct {
	st   store.Store
	opts Options
	now  func() time.Time

	cache principals // identities' principals, kept until an identity or role changes (here) or for principalTTL

	mu       sync.Mutex
	sessions map[string]*session // by token hash
	current  map[string]string   // sandbox id -> the token its proxy swaps in now
}

// New returns the service over st.
func New(st store.Store, opts Options) *Service {
	if opts.Admin == "" {
		opts.Admin = "local"
	}
	if opts.UnixUsers == nil {
		opts.UnixUsers = map[int]string{0: opts.Admin}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{st: st, opts: opts, now: time.Now, sessions: map[string]*session{}, current: map[string]string{}}
}

// Bootstrap creates the administrator on a node that has no identity yet and writes its
// token to AdminTokenFile in dir; it returns the file's path, or "" when the node had
// identities already.
func (s *Service) Bootstrap(ctx context.Context, dir string) (string, error) {
	ids, err := s.st.ListIdentities(ctx)
	if err != nil || len(ids) > 0 {
		return "", err
	}
	admin := &store.Identity{Name: s.opts.Admin, Kind: store.IdentityUser, Roles: []string{"admin"}, CreatedAt: s.now().UTC()}
	err = s.st.CreateIdentity(ctx, admin)
	s.cache.invalidate()
	if err != nil {
		return "", err
	}
	secret, _, err := s.CreateToken(ctx, s.opts.Admin, "first start", 0)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, AdminTokenFile)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the administrator's token: %w", err)
	}
	return path, nil
}

// hashToken is how a token is kept and looked up.
func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// CreateToken makes a token for identity, valid for ttl (0: until revoked), and returns
// its secret, shown this once.
func (s *Service) CreateToken(ctx context.Context, identity, name string, ttl time.Duration) (string, *store.Token, error) {
	return s.CreateTokenFormat(ctx, identity, name, TokenFormatAirlock, ttl)
}

// The formats a token's secret can take. Either is the same kind of token, kept the
// same way (a SHA-256 hash) and accepted wherever a token is: as a bearer token on the
// API and as the X-API-Key of the E2B-compatible control plane.
const (
	TokenFormatAirlock = "airlock" // al_ and 52 base32 characters
	TokenFormatE2B     = "e2b"     // e2b_ and 40 hex digits, the shape E2B's SDKs expect of an API key
)

// E2BTokenPrefix starts every token of the e2b format.
const E2BTokenPrefix = "e2b_"

// CreateTokenFormat is CreateToken with the secret in format ("" is the Airlock format).
func (s *Service) CreateTokenFormat(ctx context.Context, identity, name, format string, ttl time.Duration) (string, *store.Token, error) {
	if ttl < 0 {
		return "", nil, errdefs.Invalid("a token's lifetime cannot be negative")
	}
	var secret string
	switch format {
	case "", TokenFormatAirlock:
		secret = TokenPrefix + randomString(32)
	case TokenFormatE2B:
		b := make([]byte, 20)
		rand.Read(b)
		secret = E2BTokenPrefix + hex.EncodeToString(b)
	default:
		return "", nil, errdefs.Invalid("unknown token format %q: %s or %s", format, TokenFormatAirlock, TokenFormatE2B)
	}
	if _, err := s.st.GetIdentity(ctx, identity); err != nil {
		return "", nil, err
	}
	pfx := secret[:strings.Index(secret, "_")+1]
	t := &store.Token{ID: "tok_" + randomString(10), Identity: identity, Name: name, Hash: hashToken(secret),
		Prefix: secret[:len(pfx)+6], CreatedAt: s.now().UTC()}
	if ttl > 0 {
		t.ExpiresAt = t.CreatedAt.Add(ttl)
	}
	if err := s.st.CreateToken(ctx, t); err != nil {
		return "", nil, err
	}
	return secret, t, nil
}

// AddStaticToken keeps a token of the configuration file's tokens: list working: its
// owner becomes a service account with the developer role (if it is not an identity
// yet), and the token one of its tokens.
func (s *Service) AddStaticToken(ctx context.Context, secret, owner string) error {
	if _, err := s.st.GetIdentity(ctx, owner); errors.Is(err, errdefs.ErrNotFound) {
		id := &store.Identity{Name: owner, Kind: store.IdentityService, Roles: []string{"developer"}, CreatedAt: s.now().UTC()}
		err := s.st.CreateIdentity(ctx, id)
		s.cache.invalidate()
		if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
	} else if err != nil {
		return err
	}
	if _, err := s.st.GetTokenByHash(ctx, hashToken(secret)); err == nil {
		return nil
	}
	t := &store.Token{ID: "tok_" + randomString(10), Identity: owner, Name: "from the configuration file",
		Hash: hashToken(secret), Prefix: "(config)", CreatedAt: s.now().UTC()}
	if err := s.st.CreateToken(ctx, t); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return err
	}
	return nil
}

func unauthenticated(msg string) error {
	return &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: msg}
}

// Authenticate returns the principal of a bearer token.
func (s *Service) Authenticate(ctx context.Context, secret string) (*Principal, error) {
	bad := unauthenticated("the bearer token is not valid (wrong, expired or revoked)")
	if strings.HasPrefix(secret, SessionPrefix) {
		return nil, unauthenticated("a sandbox's session token is valid only in requests from that sandbox")
	}
	if !strings.HasPrefix(secret, TokenPrefix) && len(secret) < 16 {
		return nil, bad
	}
	t, err := s.st.GetTokenByHash(ctx, hashToken(secret))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, bad
	}
	if err != nil {
		return nil, err
	}
	if !t.RevokedAt.IsZero() || (!t.ExpiresAt.IsZero() && !s.now().Before(t.ExpiresAt)) {
		return nil, bad
	}
	p, err := s.principal(ctx, t.Identity)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, bad
	}
	if p != nil {
		p.TokenID = t.ID
	}
	return p, err
}

// TokenPrincipal is the principal of identity's token id while that token is valid
// (neither revoked nor expired) and the identity exists, with the identity's roles as
// they are now: a credential derived from the token is checked with it on each use, so
// revoking the token or narrowing the roles takes effect at once.
func (s *Service) TokenPrincipal(ctx context.Context, identity, id string) (*Principal, error) {
	bad := unauthenticated("the API key this access token came from is no longer valid (revoked or expired)")
	ids, err := s.LiveTokens(ctx, identity)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ids, id) {
		return nil, bad
	}
	p, err := s.principal(ctx, identity)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, bad
	}
	if p != nil {
		p.TokenID = id
	}
	return p, err
}

// LiveTokens lists the ids of identity's tokens that are neither revoked nor expired.
func (s *Service) LiveTokens(ctx context.Context, identity string) ([]string, error) {
	if identity == "" {
		return nil, nil // "" would list every identity's tokens
	}
	ts, err := s.st.ListTokens(ctx, identity)
	if err != nil {
		return nil, err
	}
	var ids []string
	now := s.now()
	for _, t := range ts {
		if t.Identity == identity && t.RevokedAt.IsZero() && (t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt)) {
			ids = append(ids, t.ID)
		}
	}
	return ids, nil
}

// ForUID returns the principal of a unix socket peer running as uid.
func (s *Service) ForUID(ctx context.Context, uid int) (*Principal, error) {
	name, ok := s.opts.UnixUsers[uid]
	if !ok {
		name, ok = s.cache.uid(uid, s.now())
	}
	if !ok {
		at, gen := s.now(), s.cache.generation()
		ids, err := s.st.ListIdentities(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if slices.Contains(id.UIDs, uid) {
				name, ok = id.Name, true
				s.cache.putUID(gen, at, uid, name)
				break
			}
		}
	}
	if !ok {
		return nil, unauthenticated(fmt.Sprintf("local user %d is not an Airlock identity (an administrator can map it: airlock user create NAME --uid %d)", uid, uid))
	}
	p, err := s.principal(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unauthenticated(fmt.Sprintf("local user %d maps to identity %q, which does not exist", uid, name))
	}
	return p, err
}

// principal resolves an identity's roles to permissions. A role that no longer exists
// grants nothing.
func (s *Service) principal(ctx context.Context, name string) (*Principal, error) {
	return s.cachedPrincipal(ctx, name)
}

// principalAs is principal with the given roles in place of the identity's own (nil:
// its own).
func (s *Service) principalAs(ctx context.Context, name string, as []string) (*Principal, error) {
	id, err := s.st.GetIdentity(ctx, name)
	if err != nil {
		return nil, err
	}
	roles, err := s.roles(ctx)
	if err != nil {
		return nil, err
	}
	if as != nil {
		id.Roles = as
	}
	p := &Principal{Identity: id.Name, Roles: id.Roles, perms: map[Permission]bool{}}
	for _, r := range id.Roles {
		perms, err := expand(roles[r])
		if err != nil {
			continue // a custom role left with a permission this binary lacks
		}
		for perm := range perms {
			p.perms[perm] = true
		}
	}
	return p, nil
}

// roles returns every role's entries, built in and custom.
func (s *Service) roles(ctx context.Context) (map[string][]string, error) {
	out := maps.Clone(BuiltinRoles)
	custom, err := s.st.ListRoles(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range custom {
		out[r.Name] = r.Permissions
	}
	return out, nil
}

// PeerUID returns the uid of a unix socket connection's peer.
func PeerUID(c net.Conn) (int, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}

// Forwarded is the principal of a call another cluster node authenticated and
// forwarded here, derived again from the shared store: by tokenID while that token is
// valid (revoking it stops its forwarded calls too), else by the identity's roles as
// they are now, narrowed to roles when the caller is sandbox's code with its session
// credential.
func (s *Service) Forwarded(ctx context.Context, identity, tokenID, sandbox string, roles []string) (*Principal, error) {
	if identity == "" {
		return nil, unauthenticated("a forwarded call must name its caller's identity")
	}
	if tokenID != "" {
		return s.TokenPrincipal(ctx, identity, tokenID)
	}
	var p *Principal
	var err error
	if sandbox == "" {
		p, err = s.principal(ctx, identity)
	} else {
		p, err = s.principalAs(ctx, identity, roles)
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unauthenticated("the forwarded call's identity " + identity + " no longer exists")
	}
	if err != nil {
		return nil, err
	}
	if sandbox != "" {
		p.Sandbox = sandbox
	}
	return p, nil
}
