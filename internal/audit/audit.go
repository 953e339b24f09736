// Package audit owns the path from a sandbox's DNS queries and egress decisions to event
// rows: per-sandbox rate limits, per-sandbox bounded queues, coalescing of repeated
// identical records, a counted "records_dropped" event for every record not stored, and
// a writer that drains the sandboxes' queues in turn and stores each round in one
// transaction. It must not decide egress, nor know any sandbox rule beyond the limits
// it is configured with; retention of the rows is the manager's (store.PruneEvents).
//
// Hostile surface: the rate and content of records are chosen by sandbox code (a DNS
// flood, a connection flood). Nothing one sandbox sends can take a queue slot, a token
// or a write from another sandbox, memory is bounded per sandbox (queue and coalescing
// table), and every record that is not stored is counted and reported to the sandbox
// it belongs to, never lost silently.
package audit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// Record is one audit record of a sandbox, on its way to becoming an event.
type Record struct {
	Sandbox    string
	Generation int64
	Type       string // the event type: "dns", "egress"
	Allowed    bool   // the event's cause is "allow" or "deny"
	// Key identifies identical records: while a run of them lasts (Config.Coalesce),
	// the first is stored and the rest are counted into one summary. "" never
	// coalesces.
	Key string
	// Subject names what a run is about in its summary ("denied queries for x.example").
	Subject string
	Data    any // stored as the event's JSON data
	Time    time.Time

	cause string // the event's cause when not "allow"/"deny"
}

// Config sets the writer's limits. Zero fields take the defaults.
type Config struct {
	// Rate and Burst are the token bucket of each sandbox: records it may add per
	// second, and at once after a quiet spell (defaults 100 and 1000).
	Rate  float64
	Burst int
	// Queue bounds the records of one sandbox waiting for the writer (default 2048).
	Queue int
	// Coalesce is how long a run of identical records lasts (default 10s).
	Coalesce time.Duration
	// Batch bounds the records stored in one transaction (default 512); Quantum bounds
	// one sandbox's share of a batch before the next sandbox's turn (default 64).
	Batch, Quantum int
	// NoteEvery is the shortest time between two records_dropped events of one sandbox
	// (default 1s).
	NoteEvery time.Duration
}

// Defaults.
const (
	DefaultRate     = 100
	DefaultBurst    = 1000
	DefaultQueue    = 2048
	DefaultCoalesce = 10 * time.Second
)

// maxRuns bounds a sandbox's table of runs being coalesced.
const maxRuns = 256

// DroppedType is the event type that reports records not stored.
const DroppedType = "records_dropped"

func (c *Config) defaults() {
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.Queue <= 0 {
		c.Queue = DefaultQueue
	}
	if c.Coalesce <= 0 {
		c.Coalesce = DefaultCoalesce
	}
	if c.Batch <= 0 {
		c.Batch = 512
	}
	if c.Quantum <= 0 {
		c.Quantum = 64
	}
	if c.NoteEvery <= 0 {
		c.NoteEvery = time.Second
	}
}

// Sink stores a batch of events in one transaction; store.Store is one.
type Sink interface {
	AppendEvents(ctx context.Context, evs []*store.Event) error
}

// Options are a Writer's collaborators.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Stored is called after each batch is stored (to wake event followers).
	Stored func()
	Logger *slog.Logger
}

// Writer takes records from any goroutine without blocking and stores them in the
// background. Close stores what is queued and stops it.
type Writer struct {
	cfg    Config
	sink   Sink
	now    func() time.Time
	stored func()
	log    *slog.Logger

	chain atomic.Pointer[Chain] // where stored records are also chained (nil: nowhere)

	mu      sync.Mutex
	sources map[string]*source
	turn    []string // sandboxes with queued records, in the order of their turns
	written map[string]bool

	wake    chan struct{}
	dropped atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New starts a writer that stores into sink.
func New(cfg Config, sink Sink, opts Options) *Writer {
	cfg.defaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Stored == nil {
		opts.Stored = func() {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{cfg: cfg, sink: sink, now: opts.Now, stored: opts.Stored, log: opts.Logger.With("component", "audit"),
		sources: map[string]*source{}, written: map[string]bool{}, wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go w.run()
	return w
}

// Add queues rec; it never blocks. A record over its sandbox's rate or queue is
// counted as dropped and reported in a records_dropped event of that sandbox; a
// record without a sandbox is not stored at all (no owner could ever see it).
func (w *Writer) Add(rec Record) {
	if rec.Sandbox == "" {
		return
	}
	now := w.now()
	if rec.Time.IsZero() {
		rec.Time = now
	}
	w.mu.Lock()
	s := w.source(rec.Sandbox, now)
	s.gen = rec.Generation
	queued := s.add(&w.cfg, rec, now)
	if queued && !s.inTurn {
		s.inTurn = true
		w.turn = append(w.turn, rec.Sandbox)
	}
	w.mu.Unlock()
	if !queued {
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// source returns sandbox id's state, made on first use; w.mu is held.
func (w *Writer) source(id string, now time.Time) *source {
	s := w.sources[id]
	if s == nil {
		s = &source{tokens: float64(w.cfg.Burst), refilled: now, runs: map[string]*run{}, total: &w.dropped}
		w.sources[id] = s
	}
	return s
}

// Dropped is how many records of every sandbox were not stored since the writer began.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Written returns the sandboxes that got rows since the last call, for retention.
func (w *Writer) Written() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.written))
	for id := range w.written {
		out = append(out, id)
	}
	clear(w.written)
	return out
}

// SetChain makes every stored record also a record of the hash-chained log.
func (w *Writer) SetChain(c *Chain) { w.chain.Store(c) }

// Close stores every queued record, the summaries of open runs and the pending
// records_dropped events, then stops.
func (w *Writer) Close() error {
	w.cancel()
	<-w.done
	return nil
}

// tick is how often the writer looks for runs that ended and drops to report.
const tick = 250 * time.Millisecond

func (w *Writer) run() {
	defer close(w.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		final := false
		select {
		case <-w.wake:
		case <-t.C:
		case <-w.ctx.Done():
			final = true
		}
		for {
			batch := w.take(final)
			if len(batch) == 0 {
				break
			}
			w.write(batch)
		}
		if final {
			return
		}
	}
}

// take collects the next batch: the summaries of runs that ended, the records_dropped
// events that are due, then up to Quantum records of each sandbox in turn until the
// batch is full. With final every run ends and every drop is due.
func (w *Writer) take(final bool) []Record {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var batch []Record
	for id, s := range w.sources {
		if s.endRuns(&w.cfg, now, final) && !s.inTurn {
			s.inTurn = true
			w.turn = append(w.turn, id)
		}
		if note, ok := s.note(&w.cfg, id, now, final); ok {
			batch = append(batch, note)
		}
		if s.idle(&w.cfg, now) {
			delete(w.sources, id)
		}
	}
	for len(w.turn) > 0 && len(batch) < w.cfg.Batch {
		id := w.turn[0]
		s := w.sources[id]
		n := min(w.cfg.Quantum, w.cfg.Batch-len(batch), len(s.queue))
		batch = append(batch, s.queue[:n]...)
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		w.turn = w.turn[1:]
		if len(s.queue) > 0 {
			w.turn = append(w.turn, id) // to the back of the line
		} else {
			s.inTurn = false
			s.queue = nil
		}
	}
	for _, rec := range batch {
		w.written[rec.Sandbox] = true
	}
	return batch
}

// write stores batch in one transaction. When the store refuses it, each record is
// counted as dropped for its sandbox, so the next records_dropped event says so.
func (w *Writer) write(batch []Record) {
	evs := make([]*store.Event, len(batch))
	for i, rec := range batch {
		evs[i] = rec.event()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 30*time.Second)
	defer cancel()
	err := w.sink.AppendEvents(ctx, evs)
	if c := w.chain.Load(); err == nil && c != nil {
		entries := make([]Entry, len(evs))
		for i, ev := range evs {
			entries[i] = Entry{Time: ev.Time, Action: ev.Type, Sandbox: ev.SandboxID, Result: ev.Cause, Data: ev.Data}
		}
		if cerr := c.AppendBatch(ctx, entries); cerr != nil {
			w.log.Error("chain audit records", "records", len(entries), "err", cerr)
		}
	}
	if err != nil {
		w.log.Warn("store audit records", "records", len(batch), "err", err)
		now := w.now()
		w.mu.Lock()
		for _, rec := range batch {
			if rec.Type == DroppedType {
				continue // a note that could not be stored is not a record of its own
			}
			w.source(rec.Sandbox, now).drop(rec, causeStore, 1)
		}
		w.mu.Unlock()
		return
	}
	w.stored()
}
