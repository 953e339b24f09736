package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// Why a record was not stored.
const (
	causeRate  = "rate_limit"
	causeQueue = "queue_full"
	causeStore = "store_error"
)

// source is one sandbox's state in the writer; every method runs under Writer.mu.
type source struct {
	gen      int64
	tokens   float64
	refilled time.Time
	queue    []Record
	inTurn   bool
	runs     map[string]*run

	// drops not yet reported, by cause and by record type
	byCause  map[string]int64
	byType   map[string]int64
	pending  int64
	lastNote time.Time
	total    *atomic.Int64 // the writer's count of every drop
}

// run is a series of records identical to first, of which more came after it.
type run struct {
	first Record
	more  int64
	last  time.Time
}

// add takes rec into the sandbox's run, bucket and queue, and says whether anything
// was queued (rec itself or the summary of a run that had ended).
func (s *source) add(cfg *Config, rec Record, now time.Time) bool {
	queued := false
	if rec.Key != "" {
		if r := s.runs[rec.Key]; r != nil {
			if now.Sub(r.first.Time) < cfg.Coalesce {
				r.more++
				r.last = rec.Time
				return false
			}
			queued = s.endRun(cfg, rec.Key, r)
		}
	}
	s.refill(cfg, now)
	switch {
	case s.tokens < 1:
		s.drop(rec, causeRate, 1)
		return queued
	case len(s.queue) >= cfg.Queue:
		s.drop(rec, causeQueue, 1)
		return queued
	}
	s.tokens--
	if rec.Key != "" && len(s.runs) < maxRuns {
		s.runs[rec.Key] = &run{first: rec}
	}
	s.queue = append(s.queue, rec)
	return true
}

func (s *source) refill(cfg *Config, now time.Time) {
	if d := now.Sub(s.refilled); d > 0 {
		s.tokens = min(float64(cfg.Burst), s.tokens+d.Seconds()*cfg.Rate)
		s.refilled = now
	}
}

// endRun closes the run of key and queues its summary when records were counted into
// it. A summary stands for records already let through, so it takes no token; when
// the queue is full, the records it stands for are counted as dropped.
func (s *source) endRun(cfg *Config, key string, r *run) bool {
	delete(s.runs, key)
	if r.more == 0 {
		return false
	}
	if len(s.queue) >= cfg.Queue {
		s.drop(r.first, causeQueue, r.more)
		return false
	}
	sum := r.first
	sum.Key, sum.Time = "", r.last
	sum.Data = summary{data: r.first.Data, repeats: r.more, text: fmt.Sprintf("%d more %s in %s after the first",
		r.more, r.first.Subject, r.last.Sub(r.first.Time).Round(time.Millisecond))}
	s.queue = append(s.queue, sum)
	return true
}

// endRuns closes the runs older than the coalescing window (every run when final).
func (s *source) endRuns(cfg *Config, now time.Time, final bool) bool {
	queued := false
	for key, r := range s.runs {
		if final || now.Sub(r.first.Time) >= cfg.Coalesce {
			queued = s.endRun(cfg, key, r) || queued
		}
	}
	return queued
}

func (s *source) drop(rec Record, cause string, n int64) {
	if s.byCause == nil {
		s.byCause, s.byType = map[string]int64{}, map[string]int64{}
	}
	s.byCause[cause] += n
	s.byType[rec.Type] += n
	s.pending += n
	s.total.Add(n)
}

// note returns the records_dropped event that reports the drops not yet reported, when
// one is due: at once after a quiet spell, then at most once per NoteEvery.
func (s *source) note(cfg *Config, id string, now time.Time, final bool) (Record, bool) {
	if s.pending == 0 || (!final && now.Sub(s.lastNote) < cfg.NoteEvery) {
		return Record{}, false
	}
	var why []string
	for _, c := range []struct{ cause, text string }{
		{causeRate, fmt.Sprintf("over the rate of %g records a second (burst %d)", cfg.Rate, cfg.Burst)},
		{causeQueue, fmt.Sprintf("over the queue of %d records", cfg.Queue)},
		{causeStore, "the database refused them"},
	} {
		if n := s.byCause[c.cause]; n > 0 {
			why = append(why, fmt.Sprintf("%d %s", n, c.text))
		}
	}
	main := causeRate
	for _, c := range []string{causeQueue, causeStore} {
		if s.byCause[c] > s.byCause[main] {
			main = c
		}
	}
	data := map[string]any{
		"dropped": s.pending,
		"causes":  s.byCause,
		"types":   s.byType,
		"message": fmt.Sprintf("%d audit records of this sandbox were not stored: %s", s.pending, strings.Join(why, "; ")),
	}
	rec := Record{Sandbox: id, Generation: s.gen, Type: DroppedType, Data: data, Time: now, cause: main}
	s.byCause, s.byType, s.pending, s.lastNote = nil, nil, 0, now
	return rec, true
}

// idle says the sandbox's state holds nothing that forgetting it would lose.
func (s *source) idle(cfg *Config, now time.Time) bool {
	if len(s.queue) > 0 || s.inTurn || len(s.runs) > 0 || s.pending > 0 {
		return false
	}
	s.refill(cfg, now)
	return s.tokens >= float64(cfg.Burst) && now.Sub(s.lastNote) >= cfg.NoteEvery
}

// summary is the data of a run's summary: the first record's fields plus "repeats"
// (how many identical records it stands for) and "summary" (a sentence saying so).
type summary struct {
	data    any
	repeats int64
	text    string
}

// event turns rec into the event that stores it.
func (rec Record) event() *store.Event {
	ev := &store.Event{SandboxID: rec.Sandbox, Generation: rec.Generation, Type: rec.Type, Cause: rec.cause, Time: rec.Time}
	if ev.Cause == "" {
		ev.Cause = "deny"
		if rec.Allowed {
			ev.Cause = "allow"
		}
	}
	data := rec.Data
	if sum, ok := data.(summary); ok {
		fields := map[string]any{}
		if b, err := json.Marshal(sum.data); err == nil {
			json.Unmarshal(b, &fields) // a non-object keeps only the summary's own fields
		}
		fields["repeats"], fields["summary"] = sum.repeats, sum.text
		data = fields
	}
	if data != nil {
		ev.Data, _ = json.Marshal(data)
	}
	return ev
}
