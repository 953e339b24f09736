package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// WriteClaim implements store.ClaimWriter: the record's compare-and-swap, the
// operation and the events in one write, so a burst of claims (or terminates) commits
// each once instead of once per record. On success it sets the record's version and
// update time and the events' Seqs; on failure nothing of it is stored.
func (s *Store) WriteClaim(ctx context.Context, c store.Claim) error {
	u, err := newSandboxUpdate(c.Sandbox)
	if err != nil {
		return err
	}
	opArgs, err := records.OperationArgs(c.Op)
	if err != nil {
		return err
	}
	rows, err := records.EventArgs(c.Events)
	if err != nil {
		return err
	}
	seqs := make([]int64, len(c.Events))
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := u.write(ctx, tx); err != nil {
			return err
		}
		if c.NewOp {
			if _, err := createOperation(ctx, tx, c.Op, opArgs); err != nil {
				return err
			}
		} else if err := updateOperation(ctx, tx, c.Op, opArgs); err != nil {
			return err
		}
		if len(c.Events) == 0 {
			return nil
		}
		return appendEvents(ctx, tx, c.Events, rows, seqs)
	})
	if err != nil {
		return fmt.Errorf("write sandbox %s: %w", c.Sandbox.ID, err)
	}
	u.done()
	for i, ev := range c.Events {
		ev.Seq = seqs[i]
	}
	return nil
}
