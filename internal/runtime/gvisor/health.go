package gvisor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
)

// A runsc that answers --version may still start no sandbox (a root its uid cannot
// reach, an agent gVisor cannot load), so the status check starts a test container
// (oci.Driver.Probe) every probeEvery, and again after any sandbox start failed, and
// says too when the last start failed.
const (
	probeEvery   = 10 * time.Minute
	probeTimeout = time.Minute
	// reasonBytes bounds a failure's reason in the status.
	reasonBytes = 1 << 10
)

// startHealth is what the driver knows of starting sandboxes: its last probe and the
// last start that failed with none succeeding since.
type startHealth struct {
	probing  sync.Mutex // one probe at a time; record never waits for one
	mu       sync.Mutex
	probedAt time.Time
	probeErr error
	stale    bool // a start failed since the last probe
	failedAt time.Time
	failed   error
}

// record keeps a sandbox start's outcome.
func (h *startHealth) record(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		// A start that works where the last probe failed: probe again.
		h.failed, h.stale = nil, h.stale || h.probeErr != nil
		return
	}
	h.failed, h.failedAt, h.stale = err, time.Now(), true
}

// check probes when the last probe is old or a start failed since, and marks c
// degraded when the probe or the last start failed.
func (h *startHealth) check(ctx context.Context, c *runtime.Check, probe func(context.Context) error) {
	h.probing.Lock()
	defer h.probing.Unlock()
	h.mu.Lock()
	due := h.probedAt.IsZero() || h.stale || time.Since(h.probedAt) > probeEvery
	if due {
		h.stale = false // a start that fails while the probe runs marks it stale again
	}
	h.mu.Unlock()
	if due {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := probe(pctx)
		cancel()
		h.mu.Lock()
		h.probeErr, h.probedAt = err, time.Now()
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case h.probeErr != nil:
		c.OK = false
		c.Detail += "; a test sandbox failed to start at " + at(h.probedAt) + ": " + reason(h.probeErr)
		c.Degrades = "sandboxes cannot start under runsc"
	case h.failed != nil:
		c.OK = false
		c.Detail += fmt.Sprintf("; a test sandbox started at %s, the last sandbox start failed at %s: %s",
			at(h.probedAt), at(h.failedAt), reason(h.failed))
		c.Degrades = "the last sandbox start under runsc failed"
	default:
		c.Detail += "; a test sandbox started at " + at(h.probedAt)
	}
}

// reason is an error's first line and the fatal errors runsc's processes logged
// (its boot, gofer and run logs, quoted by the OCI driver), one line, bounded.
func reason(err error) string {
	lines := strings.Split(err.Error(), "\n")
	out := []string{strings.TrimSpace(lines[0])}
	for _, l := range lines[1:] {
		_, fatal, ok := strings.Cut(l, "FATAL ERROR: ")
		if ok && !slices.ContainsFunc(out, func(o string) bool { return strings.Contains(o, fatal) }) {
			out = append(out, fatal)
		}
	}
	s := strings.Join(out, "; ")
	if len(s) > reasonBytes {
		s = strings.ToValidUTF8(s[:reasonBytes], "") + "…"
	}
	return s
}
