package audit

import (
	"context"
	"sync"
)

// Holding a request's records. A call that records something of its own (an exec's
// command and result) and is then recorded itself by the HTTP edge would write the log
// twice; held, both go in one write, still before the call is answered. The rule is
// unchanged: every record is written before the answer that it is about is sent, and a
// record that cannot be written makes the log unhealthy. So only a call whose answer
// starts after its work has ended holds (a non-streamed exec); a streamed one, or a
// terminal, writes each record at once. Only Release ends holding; anything appended
// after it (work the call left running) is written at once.

type holdKey struct{}

type held struct {
	mu      sync.Mutex
	entries []Entry
	on      bool // Holding was called
	done    bool // Release was called
}

// Hold returns ctx with a place to hold records back; nothing is held until a handler
// whose answer comes only after its work calls Holding.
func Hold(ctx context.Context) context.Context {
	return context.WithValue(ctx, holdKey{}, &held{})
}

// Holding makes Append under ctx keep entries back until Release, if ctx has a place for
// them (Hold).
func Holding(ctx context.Context) {
	if h, ok := ctx.Value(holdKey{}).(*held); ok {
		h.mu.Lock()
		h.on = !h.done
		h.mu.Unlock()
	}
}

// hold keeps e back if ctx holds records and Release has not run; it says whether it did.
func (c *Chain) hold(ctx context.Context, e Entry) bool {
	h, ok := ctx.Value(holdKey{}).(*held)
	if !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.on || h.done {
		return false
	}
	if e.Time.IsZero() {
		e.Time = c.now()
	}
	h.entries = append(h.entries, e)
	return true
}

// Release writes the entries ctx held back and then last, in one write, and ends
// holding. Without a hold in ctx it is Append(ctx, last).
func (c *Chain) Release(ctx context.Context, last Entry) error {
	var entries []Entry
	if h, ok := ctx.Value(holdKey{}).(*held); ok {
		h.mu.Lock()
		entries, h.entries, h.done = h.entries, nil, true
		h.mu.Unlock()
	}
	return c.AppendBatch(ctx, append(entries, last))
}
