package auth_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// countingStore counts the reads a request's authorisation makes.
type countingStore struct {
	store.Store
	reads atomic.Int64
}

func (c *countingStore) GetIdentity(ctx context.Context, name string) (*store.Identity, error) {
	c.reads.Add(1)
	return c.Store.GetIdentity(ctx, name)
}

func (c *countingStore) ListIdentities(ctx context.Context) ([]*store.Identity, error) {
	c.reads.Add(1)
	return c.Store.ListIdentities(ctx)
}

func (c *countingStore) ListRoles(ctx context.Context) ([]*store.Role, error) {
	c.reads.Add(1)
	return c.Store.ListRoles(ctx)
}

// A caller's principal is read from the store once and then kept, and every change to
// an identity or a role applies to the very next call: a removed identity, a revoked
// token, a role taken away or narrowed.
func TestPrincipalCacheFollowsChanges(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingStore{Store: st}
	a := auth.New(cs, auth.Options{UnixUsers: map[int]string{0: "local"}})
	ctx := context.Background()
	if _, err := a.Bootstrap(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateIdentity(ctx, "dev", "user", []string{"developer"}, []int{1000}); err != nil {
		t.Fatal(err)
	}
	secret, tok, err := a.CreateToken(ctx, "dev", "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	can := func(what string, perm auth.Permission, want bool) {
		t.Helper()
		p, err := a.ForUID(ctx, 1000)
		if err != nil {
			t.Fatalf("%s: uid 1000: %v", what, err)
		}
		if p.Can(perm) != want {
			t.Errorf("%s: uid 1000 can %s = %v, want %v (roles %v)", what, perm, !want, want, p.Roles)
		}
		p, err = a.Authenticate(ctx, secret)
		if err != nil {
			t.Fatalf("%s: dev's token: %v", what, err)
		}
		if p.Can(perm) != want || p.TokenID != tok.ID {
			t.Errorf("%s: dev's token can %s = %v (token %q), want %v (token %q)", what, perm, p.Can(perm), p.TokenID, want, tok.ID)
		}
	}
	can("first call", auth.SandboxExec, true)
	before := cs.reads.Load()
	can("second call", auth.SandboxExec, true)
	if n := cs.reads.Load() - before; n != 0 {
		t.Errorf("a second call read identities or roles %d times, want 0 (kept)", n)
	}
	// A principal handed out is the caller's own: changing it changes no other call's.
	p, _ := a.ForUID(ctx, 1000)
	p.Roles[0], p.TokenID = "admin", "tok_x"
	if q, _ := a.ForUID(ctx, 1000); q.Roles[0] != "developer" || q.TokenID != "" {
		t.Errorf("a changed principal leaked into the next call: roles %v token %q", q.Roles, q.TokenID)
	}

	if _, err := a.PutRole(ctx, "runner", []string{string(auth.SandboxRead), string(auth.SandboxExec)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetRoles(ctx, "dev", []string{"runner"}); err != nil {
		t.Fatal(err)
	}
	can("roles set to runner", auth.SandboxCreate, false)
	can("roles set to runner", auth.SandboxExec, true)
	if _, err := a.PutRole(ctx, "runner", []string{string(auth.SandboxRead)}); err != nil {
		t.Fatal(err)
	}
	can("runner narrowed", auth.SandboxExec, false)

	if _, err := a.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("a revoked token: %v, want unauthenticated", err)
	}
	if err := a.DeleteIdentity(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	if p, err := a.ForUID(ctx, 1000); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("uid 1000 after its identity was removed: %+v, %v; want unauthenticated", p, err)
	}
}
