package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// testPools: a pool put twice is replaced, survives a re-open, and deleting one that
// is not there is ErrNotFound.
func testPools(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	p := &store.Pool{Name: "py", Image: "python:3", ImageDigest: "sha256:aa", Size: 2, NetworkMode: "baseline", Limits: store.Limits{CPU: 1}}
	if err := s.PutPool(ctx, p); err != nil {
		t.Fatalf("PutPool: %v", err)
	}
	p.Size = 5
	if err := s.PutPool(ctx, p); err != nil {
		t.Fatalf("PutPool again: %v", err)
	}
	if err := s.PutPool(ctx, &store.Pool{Name: "another", Size: 1}); err != nil {
		t.Fatalf("PutPool another: %v", err)
	}
	s.Close()
	s = open(t)
	list, err := s.ListPools(ctx)
	if err != nil {
		t.Fatalf("ListPools: %v", err)
	}
	if len(list) != 2 || list[0].Name != "another" || list[1].Name != "py" || list[1].Size != 5 || list[1].Limits.CPU != 1 {
		t.Fatalf("ListPools after re-open = %+v, want another, then py of size 5", list)
	}
	if err := s.DeletePool(ctx, "py"); err != nil {
		t.Fatalf("DeletePool: %v", err)
	}
	if err := s.DeletePool(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("DeletePool twice: %v, want ErrNotFound", err)
	}
	if list, _ := s.ListPools(ctx); len(list) != 1 {
		t.Fatalf("after delete: %d pools, want 1", len(list))
	}
}
