package auth

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// A session token is valid only from its sandbox, acts with the sandbox's role when
// it has one, is refreshed once half its life has passed, expires, and dies with its
// owner.
func TestSessionTokens(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := New(st, Options{})
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return clock }
	ctx := context.Background()
	if _, err := a.CreateIdentity(ctx, "alice", "user", []string{"developer"}, nil); err != nil {
		t.Fatal(err)
	}

	tok, err := a.SessionToken(ctx, "alice", "", "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.AuthenticateSession(ctx, tok, "sb_1")
	if err != nil || p.Identity != "alice" || !p.Can(SandboxCreate) || p.Sandbox != "sb_1" {
		t.Fatalf("from its sandbox: %+v, %v", p, err)
	}
	if _, err := a.AuthenticateSession(ctx, tok, "sb_2"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("from another sandbox: %v, want unauthenticated", err)
	}
	if _, err := a.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("as a plain bearer token (outside any sandbox): %v, want unauthenticated", err)
	}

	// The sandbox's narrower role is all it acts with.
	viewerTok, err := a.SessionToken(ctx, "alice", "viewer", "sb_3")
	if err != nil {
		t.Fatal(err)
	}
	p, err = a.AuthenticateSession(ctx, viewerTok, "sb_3")
	if err != nil || !slices.Equal(p.Roles, []string{"viewer"}) || p.Can(SandboxCreate) || !p.Can(SandboxRead) {
		t.Errorf("with role viewer: %+v, %v", p, err)
	}

	// The same token until half its life has passed, then a fresh one; the old one
	// stays valid until it expires.
	clock = clock.Add(SessionTTL/2 - time.Second)
	if again, _ := a.SessionToken(ctx, "alice", "", "sb_1"); again != tok {
		t.Error("a new token before half the lifetime passed")
	}
	clock = clock.Add(2 * time.Second)
	fresh, err := a.SessionToken(ctx, "alice", "", "sb_1")
	if err != nil || fresh == tok {
		t.Fatalf("after half the lifetime: %v, same token %v", err, fresh == tok)
	}
	if _, err := a.AuthenticateSession(ctx, tok, "sb_1"); err != nil {
		t.Errorf("the older token before its expiry: %v", err)
	}
	clock = clock.Add(SessionTTL / 2)
	if _, err := a.AuthenticateSession(ctx, tok, "sb_1"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("an expired token: %v, want unauthenticated", err)
	}
	if _, err := a.AuthenticateSession(ctx, fresh, "sb_1"); err != nil {
		t.Errorf("the fresh token: %v", err)
	}

	// An owner that is gone takes its sandboxes' sessions with it, at once.
	if err := a.DeleteIdentity(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AuthenticateSession(ctx, fresh, "sb_1"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("the session of a deleted owner: %v, want unauthenticated", err)
	}
	if _, err := a.SessionToken(ctx, "alice", "", "sb_1"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("minting for a deleted owner: %v, want unauthenticated", err)
	}
	a.EndSessions("sb_3")
	if _, err := a.AuthenticateSession(ctx, viewerTok, "sb_3"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("after EndSessions: %v, want unauthenticated", err)
	}
}
