package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// Group commit. Every write goes through the one writer connection; a burst of writes
// (a hundred creates served from a warm pool at once, each writing its operation, its
// claim, its event and its audit record) queued there one transaction each, and each
// commit wrote the same few pages of the WAL again. Writes that go through inTx and
// arrive while another commit is under way wait for it and are then committed
// together, in one transaction, by one of them (the leader): each runs in its own
// savepoint, so one that fails is rolled back alone and fails alone, and the others
// see what those before them in the batch wrote, as if each had its own transaction
// in that order. A caller returns once the commit that holds its write is done: a
// write acknowledged is as durable as before (WAL, synchronous NORMAL), and one whose
// commit fails gets that error, its write not made.
type group struct {
	mu      sync.Mutex
	queue   []*groupWrite
	leading bool // a leader is committing; the next batch waits for it
}

type groupWrite struct {
	ctx context.Context
	fn  func(ctx context.Context, tx *sql.Tx) error
	err error
	// panicked is what fn panicked with, if it did: its write is not made, and inTx
	// panics with it in the caller's goroutine, as fn would have without the batch.
	panicked any
	skipped  bool      // not run: its ctx was done before its turn
	wake     chan bool // true: lead the next batch; false: done, err is set
}

// maxBatch bounds the writes of one commit.
const maxBatch = 256

// inTx runs fn in a write transaction, maybe with other callers' writes, and commits
// it; fn's statements run with ctx's values but are not cancelled with it (an
// interrupted statement would roll back the whole batch). A write whose ctx is done
// before its turn is not run.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	w := &groupWrite{ctx: ctx, fn: fn, wake: make(chan bool, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if !lead {
		if lead = <-w.wake; !lead {
			return w.result()
		}
	}
	// Lead: commit the queue as it is now (this write is in it), then hand the lead to
	// the first write that arrived meanwhile, if any.
	g.mu.Lock()
	n := min(len(g.queue), maxBatch)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	s.commitBatch(batch)
	g.mu.Lock()
	var next *groupWrite
	if len(g.queue) > 0 {
		next = g.queue[0]
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	if next != nil {
		next.wake <- true
	}
	for _, o := range batch {
		if o != w {
			o.wake <- false
		}
	}
	return w.result()
}

// result is what inTx gives w's caller once its batch is done.
func (w *groupWrite) result() error {
	if w.panicked != nil {
		panic(w.panicked)
	}
	return w.err
}

// run runs w's fn in tx and sets w.err, or w.panicked and an error if fn panics: the
// leader runs every write of its batch, and one write's panic must neither leave the
// others waiting nor keep the lead from passing on.
func (w *groupWrite) run(ctx context.Context, tx *sql.Tx) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked = p
			w.err = fmt.Errorf("write panicked: %v", p)
		}
	}()
	w.err = w.fn(ctx, tx)
}

// commitBatch runs the writes of batch in one transaction and sets each one's err.
func (s *Store) commitBatch(batch []*groupWrite) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		for _, w := range batch {
			w.err = err
		}
		return
	}
	defer tx.Rollback()
	ok := 0
	for i, w := range batch {
		if w.err = w.ctx.Err(); w.err != nil {
			w.skipped = true
			continue
		}
		if len(batch) == 1 {
			w.run(context.WithoutCancel(w.ctx), tx)
		} else if err := savepoint(tx, w); err != nil {
			// The transaction may be gone (SQLite rolls back on some errors): nothing
			// of the batch is committed, and the rest must not run outside it.
			failBatch(batch[:i+1], err)
			for _, o := range batch[i+1:] {
				o.err = fmt.Errorf("a write committed with it failed: %w", err)
			}
			return
		}
		if w.err == nil {
			ok++
		}
	}
	if ok == 0 {
		return
	}
	if err := tx.Commit(); err != nil {
		failBatch(batch, fmt.Errorf("commit: %w", err))
	}
}

// failBatch gives err to each write of batch that ran, none of which is made: also to
// one that failed on its own, which may have failed on what another wrote (a conflict
// with a row, or an operation with its idempotency key, that is not committed after all).
func failBatch(batch []*groupWrite, err error) {
	for _, w := range batch {
		if !w.skipped {
			w.err = err
		}
	}
}

// savepoint runs w in a savepoint of tx: its changes stay if it succeeds (w.err nil),
// and are undone alone if it fails (w.err). An error of its own is the savepoint's:
// then the transaction can no longer be trusted.
func savepoint(tx *sql.Tx, w *groupWrite) error {
	ctx := context.WithoutCancel(w.ctx)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT w"); err != nil {
		return err
	}
	if w.run(ctx, tx); w.err != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO w"); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, "RELEASE w")
	return err
}
