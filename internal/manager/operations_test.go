package manager

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// opRecordFails fails every operation update while fail is set, as a full disk does.
type opRecordFails struct {
	store.Store
	fail atomic.Bool
}

func (s *opRecordFails) UpdateOperation(ctx context.Context, op *store.Operation) error {
	if s.fail.Load() {
		return errors.New("database or disk is full")
	}
	return s.Store.UpdateOperation(ctx, op)
}

// TestOperationNotRecordedIsNotReportedSucceeded: an operation whose success cannot be
// written is not answered as a success, since the record, which a client that asks
// again reads, does not say so.
func TestOperationNotRecordedIsNotReportedSucceeded(t *testing.T) {
	dir := t.TempDir()
	inner, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	imgs, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	st := &opRecordFails{Store: inner}
	m := New(DefaultConfig(), st, newFake(t), imgs, nil)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(true)
	op, _, err := m.Suspend(ctx, local, "a")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("suspend whose outcome cannot be recorded: %v; want unavailable", err)
	}
	st.fail.Store(false)
	if got, err := inner.GetOperation(ctx, op.ID); err != nil || got.State == store.OpSucceeded {
		t.Errorf("the stored operation: %+v, %v; want it not succeeded", got, err)
	}
}
