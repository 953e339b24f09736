package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/airlockhq/airlock/internal/store"
)

// testClusterKeys: the first claim of a name stores its fingerprint, later claims get
// it back unchanged, names are apart, and a claim survives a re-open.
func testClusterKeys(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	claim := func(name, fp, want string) {
		t.Helper()
		got, err := s.ClaimClusterKey(ctx, name, fp)
		if err != nil || got != want {
			t.Fatalf("ClaimClusterKey(%q, %q) = %q, %v; want %q", name, fp, got, err, want)
		}
	}
	claim("audit.key", "fp-a1", "fp-a1")
	claim("audit.key", "fp-a2", "fp-a1")
	claim("secret.key", "fp-s1", "fp-s1")
	s.Close()
	s = open(t)
	claim("audit.key", "fp-a3", "fp-a1")
	claim("secret.key", "fp-s2", "fp-s1")
}

// testConcurrentClusterKeys: of nodes claiming one name at once, exactly one's
// fingerprint is stored and every one gets that one back.
func testConcurrentClusterKeys(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	got := make([]string, workers)
	errs := parallel(func(i int) (err error) {
		got[i], err = s.ClaimClusterKey(ctx, "secret.key", fmt.Sprintf("fp-%02d", i))
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim #%d: %v", i, err)
		}
	}
	winner := got[0]
	valid := false
	for i := range workers {
		if got[i] != winner {
			t.Fatalf("claim #%d got %q, claim #0 got %q; want one fingerprint for all", i, got[i], winner)
		}
		valid = valid || winner == fmt.Sprintf("fp-%02d", i)
	}
	if !valid {
		t.Fatalf("stored fingerprint %q is none of the claimants'", winner)
	}
	if again, err := s.ClaimClusterKey(ctx, "secret.key", "fp-late"); err != nil || again != winner {
		t.Fatalf("late claim = %q, %v; want %q", again, err, winner)
	}
}
