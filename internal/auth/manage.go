package auth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// checkRoles says whether every role exists.
func (s *Service) checkRoles(ctx context.Context, roles []string) error {
	all, err := s.roles(ctx)
	if err != nil {
		return err
	}
	for _, r := range roles {
		if _, ok := all[r]; !ok {
			return errdefs.Invalid("unknown role %q; roles are %v", r, slices.Sorted(maps.Keys(all)))
		}
	}
	return nil
}

// CreateIdentity adds a user or service account with roles, and the local uids that are
// it over the unix socket.
func (s *Service) CreateIdentity(ctx context.Context, name, kind string, roles []string, uids []int) (*store.Identity, error) {
	if !nameRE().MatchString(name) {
		return nil, errdefs.Invalid("invalid identity name %q: a name is %s", name, NameRule)
	}
	if kind == "" {
		kind = store.IdentityUser
	}
	if kind != store.IdentityUser && kind != store.IdentityService {
		return nil, errdefs.Invalid("invalid identity kind %q: user or service", kind)
	}
	if len(roles) == 0 {
		return nil, errdefs.Invalid("an identity needs at least one role")
	}
	if err := s.checkRoles(ctx, roles); err != nil {
		return nil, err
	}
	for _, uid := range uids {
		if uid < 0 {
			return nil, errdefs.Invalid("invalid uid %d", uid)
		}
		if owner, ok := s.opts.UnixUsers[uid]; ok && owner != name {
			return nil, errdefs.Invalid("uid %d is the configuration's for %q", uid, owner)
		}
	}
	id := &store.Identity{Name: name, Kind: kind, Roles: roles, UIDs: uids, CreatedAt: s.now().UTC()}
	defer s.cache.invalidate()
	return id, s.st.CreateIdentity(ctx, id)
}

// ListIdentities lists every identity.
func (s *Service) ListIdentities(ctx context.Context) ([]*store.Identity, error) {
	return s.st.ListIdentities(ctx)
}

// SetRoles replaces an identity's roles; the change applies to its next call. Its
// sandboxes keep the role they were created with.
func (s *Service) SetRoles(ctx context.Context, name string, roles []string) (*store.Identity, error) {
	if len(roles) == 0 {
		return nil, errdefs.Invalid("an identity needs at least one role")
	}
	if err := s.checkRoles(ctx, roles); err != nil {
		return nil, err
	}
	id, err := s.st.GetIdentity(ctx, name)
	if err != nil {
		return nil, err
	}
	if name == s.opts.Admin && !slices.Contains(roles, "admin") {
		return nil, errdefs.Precondition("%q is the node's administrator and keeps the admin role", name)
	}
	id.Roles = roles
	defer s.cache.invalidate()
	return id, s.st.UpdateIdentity(ctx, id)
}

// DeleteIdentity removes an identity and its tokens: its calls stop at once.
func (s *Service) DeleteIdentity(ctx context.Context, name string) error {
	if name == s.opts.Admin {
		return errdefs.Precondition("%q is the node's administrator and cannot be removed", name)
	}
	defer s.cache.invalidate()
	return s.st.DeleteIdentity(ctx, name)
}

// RoleInfo is a role and what it allows.
type RoleInfo struct {
	Name        string
	Permissions []string
	Builtin     bool
}

// ListRoles lists the built-in and the custom roles.
func (s *Service) ListRoles(ctx context.Context) ([]RoleInfo, error) {
	var out []RoleInfo
	for _, name := range slices.Sorted(maps.Keys(BuiltinRoles)) {
		out = append(out, RoleInfo{Name: name, Permissions: BuiltinRoles[name], Builtin: true})
	}
	custom, err := s.st.ListRoles(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range custom {
		out = append(out, RoleInfo{Name: r.Name, Permissions: r.Permissions})
	}
	return out, nil
}

// PutRole creates or replaces a custom role.
func (s *Service) PutRole(ctx context.Context, name string, perms []string) (*store.Role, error) {
	if !nameRE().MatchString(name) {
		return nil, errdefs.Invalid("invalid role name %q: a name is %s", name, NameRule)
	}
	if _, ok := BuiltinRoles[name]; ok {
		return nil, errdefs.Invalid("%q is a built-in role and cannot be changed", name)
	}
	if len(perms) == 0 {
		return nil, errdefs.Invalid("a role needs at least one permission")
	}
	if _, err := expand(perms); err != nil {
		return nil, errdefs.Invalid("role %q: %v", name, err)
	}
	r := &store.Role{Name: name, Permissions: perms, CreatedAt: s.now().UTC()}
	defer s.cache.invalidate()
	return r, s.st.PutRole(ctx, r)
}

// DeleteRole removes a custom role no identity holds.
func (s *Service) DeleteRole(ctx context.Context, name string) error {
	if _, ok := BuiltinRoles[name]; ok {
		return errdefs.Invalid("%q is a built-in role and cannot be removed", name)
	}
	ids, err := s.st.ListIdentities(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if slices.Contains(id.Roles, name) {
			return errdefs.Precondition("role %q is held by %q; take it away first", name, id.Name)
		}
	}
	defer s.cache.invalidate()
	return s.st.DeleteRole(ctx, name)
}

// ListTokens lists identity's tokens ("" for all); no secret is in them.
func (s *Service) ListTokens(ctx context.Context, identity string) ([]*store.Token, error) {
	return s.st.ListTokens(ctx, identity)
}

// RevokeToken revokes a token: the next request with it is refused.
func (s *Service) RevokeToken(ctx context.Context, id string) (*store.Token, error) {
	all, err := s.st.ListTokens(ctx, "")
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(all, func(t *store.Token) bool { return t.ID == id })
	if i < 0 {
		return nil, errdefs.NotFound("token %q not found", id)
	}
	t := all[i]
	if t.RevokedAt.IsZero() {
		t.RevokedAt = s.now().UTC()
		if err := s.st.UpdateToken(ctx, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// parseTTL reads a token lifetime ("" for none).
func ParseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("a lifetime is a positive duration such as 720h")
	}
	return d, nil
}

// MayActAs checks that a sandbox p creates may act with role: the role exists and
// grants nothing p does not hold (an administrator holds everything).
func (s *Service) MayActAs(ctx context.Context, p *Principal, role string) error {
	roles, err := s.roles(ctx)
	if err != nil {
		return err
	}
	entries, ok := roles[role]
	if !ok {
		return errdefs.NotFound("role %q does not exist (airlock role ls lists them)", role)
	}
	perms, err := expand(entries)
	if err != nil {
		return errdefs.Precondition("role %q: %v", role, err)
	}
	for _, perm := range slices.Sorted(maps.Keys(perms)) {
		if !p.Can(perm) {
			return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: fmt.Sprintf(
				"role %q grants %s, which %q does not hold: a sandbox acts with a role no wider than its creator's", role, perm, p.Identity)}
		}
	}
	return nil
}
