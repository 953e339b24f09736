package auth

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// Two nodes on one store: a change of identities or roles made on one reaches the
// other's cache within principalTTL, though nothing tells that node of it.
func TestPrincipalCacheStalenessAcrossNodes(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b := New(st, Options{}), New(st, Options{})
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return clock }
	ctx := context.Background()
	if _, err := b.CreateIdentity(ctx, "dev", "user", []string{"developer"}, []int{1000}); err != nil {
		t.Fatal(err)
	}
	canExec := func() bool {
		t.Helper()
		p, err := a.ForUID(ctx, 1000)
		return err == nil && p.Can(SandboxExec)
	}
	if !canExec() {
		t.Fatal("uid 1000 cannot exec on node a before any change")
	}
	if _, err := b.SetRoles(ctx, "dev", []string{"viewer"}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(principalTTL)
	if canExec() {
		t.Errorf("node a still lets dev exec %s after node b took the developer role away", principalTTL)
	}
	if err := b.DeleteIdentity(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(principalTTL)
	if _, err := a.ForUID(ctx, 1000); err == nil {
		t.Errorf("node a still maps uid 1000 %s after node b removed its identity", principalTTL)
	}
}
