package cli

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// lateSignalDelay is how long a verb of lateSignalVerbs runs before it catches SIGINT
// and SIGTERM.
const lateSignalDelay = 50 * time.Millisecond

// lateSignalVerbs leave nothing on this machine to undo when they are interrupted: no
// terminal mode, no ephemeral sandbox, no local file half written. They catch SIGINT and
// SIGTERM only once they have run for lateSignalDelay, because setting up os/signal
// starts threads (its goroutine locked to one, and the one that waits for signals) that
// cost a call like ls or exec a measurable part of its start, and most such calls are
// over before then. A signal sooner ends the process by the signal's default action:
// the daemon sees the same closed connection as from a cancelled call.
var lateSignalVerbs = map[*verb]bool{
	lsVerb: true, getVerb: true, execVerb: true, statusVerb: true, versionVerb: true,
}

// SignalContext returns the context for Run with args, which ends on SIGINT or SIGTERM
// (at once, or after lateSignalDelay for help and the verbs of lateSignalVerbs), and
// the function that releases it and gives those signals back their default action.
func SignalContext(args []string) (context.Context, func()) {
	name, _ := splitVerb(args)
	switch name {
	case "", "help", "-h", "-help", "--help": // help, the version, a usage error
	default:
		if v := lookupVerb(name); v == nil || !lateSignalVerbs[v] {
			return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		stopped bool
		stopSig func() = func() {}
	)
	t := time.AfterFunc(lateSignalDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			var sctx context.Context
			sctx, stopSig = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			context.AfterFunc(sctx, cancel)
		}
	})
	return ctx, func() {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		stopSig()
		cancel()
	}
}
