package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

func testIdentities(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	alice := &store.Identity{Name: "alice", Kind: store.IdentityUser, Roles: []string{"developer"}, UIDs: []int{1000},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	ok(t, s.CreateIdentity(ctx, alice), "CreateIdentity(alice)")
	isErr(t, s.CreateIdentity(ctx, alice), errdefs.ErrAlreadyExists, "CreateIdentity(alice) again")
	got, err := s.GetIdentity(ctx, "alice")
	ok(t, err, "GetIdentity(alice)")
	if got.Kind != store.IdentityUser || !slices.Equal(got.Roles, []string{"developer"}) || !slices.Equal(got.UIDs, []int{1000}) || !got.CreatedAt.Equal(alice.CreatedAt) {
		t.Errorf("GetIdentity = %+v, want %+v", got, alice)
	}
	_, err = s.GetIdentity(ctx, "bob")
	isErr(t, err, errdefs.ErrNotFound, "GetIdentity(bob)")
	alice.Roles = []string{"viewer"}
	ok(t, s.UpdateIdentity(ctx, alice), "UpdateIdentity(alice)")
	if got, _ := s.GetIdentity(ctx, "alice"); !slices.Equal(got.Roles, []string{"viewer"}) {
		t.Errorf("roles after update = %v", got.Roles)
	}
	isErr(t, s.UpdateIdentity(ctx, &store.Identity{Name: "bob"}), errdefs.ErrNotFound, "UpdateIdentity(bob)")
	ok(t, s.CreateIdentity(ctx, &store.Identity{Name: "ci", Kind: store.IdentityService}), "CreateIdentity(ci)")
	list, err := s.ListIdentities(ctx)
	ok(t, err, "ListIdentities")
	if len(list) != 2 || list[0].Name != "alice" || list[1].Name != "ci" {
		t.Errorf("ListIdentities = %v, want alice and ci", list)
	}

	tok := &store.Token{ID: "tok_1", Identity: "alice", Hash: "h1", Prefix: "al_abc", CreatedAt: time.Now().UTC()}
	ok(t, s.CreateToken(ctx, tok), "CreateToken(tok_1)")
	isErr(t, s.CreateToken(ctx, &store.Token{ID: "tok_2", Identity: "ci", Hash: "h1"}), errdefs.ErrAlreadyExists, "CreateToken with a hash taken")
	ok(t, s.CreateToken(ctx, &store.Token{ID: "tok_3", Identity: "ci", Hash: "h3"}), "CreateToken(tok_3)")
	got2, err := s.GetTokenByHash(ctx, "h1")
	ok(t, err, "GetTokenByHash(h1)")
	if got2.ID != "tok_1" || got2.Identity != "alice" {
		t.Errorf("GetTokenByHash = %+v", got2)
	}
	_, err = s.GetTokenByHash(ctx, "nope")
	isErr(t, err, errdefs.ErrNotFound, "GetTokenByHash(nope)")
	tok.RevokedAt = time.Now().UTC()
	ok(t, s.UpdateToken(ctx, tok), "UpdateToken(tok_1)")
	if got, _ := s.GetTokenByHash(ctx, "h1"); got.RevokedAt.IsZero() {
		t.Error("the revocation was not kept")
	}
	if all, _ := s.ListTokens(ctx, ""); len(all) != 2 {
		t.Errorf("ListTokens() = %d tokens, want 2", len(all))
	}
	if mine, _ := s.ListTokens(ctx, "ci"); len(mine) != 1 || mine[0].ID != "tok_3" {
		t.Errorf("ListTokens(ci) = %v", mine)
	}
	ok(t, s.DeleteIdentity(ctx, "ci"), "DeleteIdentity(ci)")
	if _, err := s.GetTokenByHash(ctx, "h3"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted identity's token is still there: %v", err)
	}
	isErr(t, s.DeleteIdentity(ctx, "ci"), errdefs.ErrNotFound, "DeleteIdentity(ci) again")

	ok(t, s.PutRole(ctx, &store.Role{Name: "ops", Permissions: []string{"sandbox.read"}}), "PutRole(ops)")
	ok(t, s.PutRole(ctx, &store.Role{Name: "ops", Permissions: []string{"sandbox.read", "audit.read"}}), "PutRole(ops) again")
	roles, err := s.ListRoles(ctx)
	ok(t, err, "ListRoles")
	if len(roles) != 1 || len(roles[0].Permissions) != 2 {
		t.Errorf("ListRoles = %+v, want ops with two permissions", roles)
	}
	ok(t, s.DeleteRole(ctx, "ops"), "DeleteRole(ops)")
	isErr(t, s.DeleteRole(ctx, "ops"), errdefs.ErrNotFound, "DeleteRole(ops) again")
}

func testSecrets(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sec := &store.Secret{Owner: "alice", Name: "gh", Type: "token", AllowedHosts: []string{"api.github.com"},
		Versions: []store.SecretVersion{{Version: 1, KeyID: "k1", Sealed: []byte{1, 2, 3}}}}
	ok(t, s.CreateSecret(ctx, sec), "CreateSecret(alice/gh)")
	isErr(t, s.CreateSecret(ctx, &store.Secret{Owner: "alice", Name: "gh"}), errdefs.ErrAlreadyExists, "CreateSecret(alice/gh) again")
	ok(t, s.CreateSecret(ctx, &store.Secret{Owner: "bob", Name: "gh"}), "CreateSecret(bob/gh)")
	a, err := s.GetSecret(ctx, "alice", "gh")
	ok(t, err, "GetSecret(alice/gh)")
	b, _ := s.GetSecret(ctx, "alice", "gh")
	a.Versions = append(a.Versions, store.SecretVersion{Version: 2})
	ok(t, s.UpdateSecret(ctx, a), "UpdateSecret")
	b.RevokedAt = time.Now()
	isErr(t, s.UpdateSecret(ctx, b), errdefs.ErrVersionConflict, "UpdateSecret from a stale read")
	if got, _ := s.GetSecret(ctx, "alice", "gh"); len(got.Versions) != 2 || !got.RevokedAt.IsZero() || string(got.Versions[0].Sealed) != "\x01\x02\x03" {
		t.Errorf("after the updates: %+v", got)
	}
	_, err = s.GetSecret(ctx, "carol", "gh")
	isErr(t, err, errdefs.ErrNotFound, "GetSecret(carol/gh)")
	if mine, _ := s.ListSecrets(ctx, "alice"); len(mine) != 1 {
		t.Errorf("ListSecrets(alice) = %d", len(mine))
	}
	isErr(t, s.DeleteSecret(ctx, "carol", "gh"), errdefs.ErrNotFound, "DeleteSecret of another owner's")
	if all, _ := s.ListSecrets(ctx, ""); len(all) != 2 {
		t.Errorf("ListSecrets() = %d", len(all))
	}
	ok(t, s.DeleteSecret(ctx, "alice", "gh"), "DeleteSecret(alice/gh)")
	_, err = s.GetSecret(ctx, "alice", "gh")
	isErr(t, err, errdefs.ErrNotFound, "GetSecret after DeleteSecret")
}
