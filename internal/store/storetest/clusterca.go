package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// caRecord is a cluster CA record whose every field says which node made it.
func caRecord(i int) *store.ClusterCARecord {
	tag := func(field string) []byte { return fmt.Appendf(nil, "%s-%02d\x00\xff", field, i) }
	return &store.ClusterCARecord{CertPEM: tag("cert"), SealedKey: tag("key"), Salt: tag("salt"),
		Verifier: tag("verifier"), CreatedAt: base.Add(time.Duration(i) * time.Second)}
}

// testClusterCA: there is no CA before the first put; the first put is stored byte for
// byte and returned, later puts get it back unchanged, and it survives a re-open.
func testClusterCA(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	if r, err := s.GetClusterCA(ctx); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("GetClusterCA on an empty store = %v, %v; want ErrNotFound", r, err)
	}
	first := caRecord(1)
	want := *first
	want.CreatedAt = first.CreatedAt.UTC()
	check := func(what string, got *store.ClusterCARecord, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.CreatedAt.Equal(want.CreatedAt) {
			got.CreatedAt = want.CreatedAt
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("%s = %+v; want %+v", what, *got, want)
		}
	}
	got, err := s.PutClusterCAIfAbsent(ctx, first)
	check("first put", got, err)
	got, err = s.PutClusterCAIfAbsent(ctx, caRecord(2))
	check("second put", got, err)
	got, err = s.GetClusterCA(ctx)
	check("get", got, err)
	s.Close()
	s = open(t)
	got, err = s.GetClusterCA(ctx)
	check("get after re-open", got, err)
}

// testConcurrentClusterCA: of nodes putting a CA at once, exactly one's record is
// stored and every one gets that one back.
func testConcurrentClusterCA(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	got := make([]*store.ClusterCARecord, workers)
	errs := parallel(func(i int) (err error) {
		got[i], err = s.PutClusterCAIfAbsent(ctx, caRecord(i))
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put #%d: %v", i, err)
		}
	}
	winner := -1
	for i := range workers {
		if string(got[0].CertPEM) == string(caRecord(i).CertPEM) {
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("stored CA %q is none of the putters'", got[0].CertPEM)
	}
	want := caRecord(winner)
	for i := range workers {
		g := got[i]
		if string(g.CertPEM) != string(want.CertPEM) || string(g.SealedKey) != string(want.SealedKey) ||
			string(g.Salt) != string(want.Salt) || string(g.Verifier) != string(want.Verifier) {
			t.Fatalf("put #%d got the CA of %q, put #0 that of %q; want one CA for all", i, g.CertPEM, want.CertPEM)
		}
	}
	if again, err := s.GetClusterCA(ctx); err != nil || string(again.SealedKey) != string(want.SealedKey) {
		t.Fatalf("get after the puts = %v, %v; want the CA of put #%d", again, err, winner)
	}
}
