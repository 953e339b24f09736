package agent

import (
	"context"
	"sync"
	"time"
)

// Lifetime is when the agent stops everything on its own clock — the sandbox's maximum
// lifetime, which holds with the daemon down. The daemon may move it (a lifetime set
// through the API), over the agent's socket, which only the host reaches.
type Lifetime struct {
	mu     sync.Mutex
	end    time.Time // zero: none
	timer  *time.Timer
	cancel context.CancelFunc
}

// NewLifetime is a lifetime that ends at end (zero: never).
func NewLifetime(end time.Time) *Lifetime { return &Lifetime{end: end} }

// start arms the lifetime: at its end, cancel stops the agent.
func (l *Lifetime) start(cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel = cancel
	l.arm()
}

func (l *Lifetime) arm() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if !l.end.IsZero() && l.cancel != nil {
		l.timer = time.AfterFunc(time.Until(l.end), l.cancel)
	}
}

// Set moves the end to end (zero: never).
func (l *Lifetime) Set(end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end = end
	l.arm()
}

func (l *Lifetime) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
}
