package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// go test -timeout ends a test binary with a panic that runs no cleanup, so a test
// that hangs would leave its nodes' sandboxes running. Two deadlines come before it:
// each test that starts a node has its own (Watchdog), which fails the test and
// unblocks it so that its cleanups run; and the whole process has one a little before
// the -timeout (Main), which removes what this process's nodes made and exits.

// defaultTestLimit is how long one test that starts a node may take, unless
// AIRLOCK_TEST_LIMIT (a Go duration) says otherwise.
const defaultTestLimit = 10 * time.Minute

// testLimit is defaultTestLimit or AIRLOCK_TEST_LIMIT.
func testLimit() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("AIRLOCK_TEST_LIMIT")); err == nil && d > 0 {
		return d
	}
	return defaultTestLimit
}

// margins before the -timeout: the process's own deadline leaves processMargin for
// removing what its nodes made; a test's leaves testMargin for its cleanups too.
func margins(timeout time.Duration) (test, process time.Duration) {
	return min(3*time.Minute, timeout/4), min(time.Minute, timeout/10)
}

// Watchdog gives the test t a deadline: the sooner of the test limit from now
// (AIRLOCK_TEST_LIMIT, default 10 minutes) and a margin before go test's -timeout.
// There it fails the test with every goroutine's stack and calls stop, which should
// make whatever the test waits on return an error (NewNode closes the node's API), so
// the test ends and its cleanups run. The context it returns ends then too.
func Watchdog(t testing.TB, stop func()) context.Context {
	t.Helper()
	limit := testLimit()
	deadline := time.Now().Add(limit)
	why := fmt.Sprintf("the per-test limit of %v (AIRLOCK_TEST_LIMIT)", limit)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			margin, _ := margins(time.Until(end))
			if end.Add(-margin).Before(deadline) {
				deadline, why = end.Add(-margin), "go test's -timeout (less a margin for cleanups)"
			}
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t.Errorf("the test is still running at %s; failing it so that its cleanups run. Goroutines:\n%s", why, stacks())
		if stop != nil {
			stop()
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-finished // no Errorf once the test is over
		cancel()
	})
	return ctx
}

// processWatchdog ends the process before go test's -timeout (if there is one) would:
// it prints every goroutine's stack, removes what this process's nodes made, and
// exits with status 2. The returned func stops it.
func processWatchdog() (stop func()) {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	timeout, _ := f.Value.(flag.Getter).Get().(time.Duration)
	if timeout <= 0 {
		return func() {}
	}
	_, margin := margins(timeout)
	timer := time.AfterFunc(timeout-margin, func() {
		fmt.Fprintf(os.Stderr, "testenv: the tests are still running %v before -timeout %v: removing what this process's nodes made and exiting. Goroutines:\n%s\n", margin, timeout, stacks())
		sweepOwn()
		os.Exit(2)
	})
	return func() { timer.Stop() }
}

// sweepOwn is Sweep for this process's own directories.
func sweepOwn() {
	me := processID(os.Getpid())
	sweepMarked(os.Stderr, "that this process made", func(dir string) bool { return owner(dir) == me })
}

// stacks returns every goroutine's stack, up to 4 MiB.
func stacks() string {
	buf := make([]byte, 4<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
