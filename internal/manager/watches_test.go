package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestWatchesPerSandboxAreCapped: file watches and sessions of one sandbox count
// against one cap; past it both are refused with a quota error naming the limit, and
// a closed watch or an ended session gives its place back. Another sandbox is not
// touched by the first one's watches.
func TestWatchesPerSandboxAreCapped(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	old := maxWatches
	maxWatches = 2
	t.Cleanup(func() { maxWatches = old })
	for _, name := range []string{"a", "b"} {
		if _, _, err := m.Create(ctx, local, CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := m.Work(ctx, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Watch(ctx, "/", false)
	if err != nil {
		t.Fatalf("first watch: %v", err)
	}
	sess, err := m.StartSession(ctx, "local", "a", agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatalf("a session as the second watch: %v", err)
	}
	isCap := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(err.Error(), "2 watches open") {
			t.Errorf("%s past the cap: %v; want a quota error naming the limit of 2", what, err)
		}
	}
	_, err = w.Watch(ctx, "/", true)
	isCap("a watch", err)
	_, err = m.StartSession(ctx, "local", "a", agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"true"}})
	isCap("a session", err)

	wb, err := m.Work(ctx, "local", "b")
	if err != nil {
		t.Fatal(err)
	}
	other, err := wb.Watch(ctx, "/", false)
	if err != nil {
		t.Errorf("a watch of another sandbox: %v", err)
	} else {
		other.Close()
	}

	first.Close()
	again, err := w.Watch(ctx, "/", false)
	if err != nil {
		t.Fatalf("a watch after one was closed: %v", err)
	}
	defer again.Close()
	cl, _, err := m.agentOf(ctx, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.CloseSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	open := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.watches[w.Sandbox().ID]
	}
	// The session's watch ends in the background once the agent says it has.
	for deadline := time.Now().Add(10 * time.Second); open() != 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open(); n != 1 {
		t.Errorf("after the session ended the sandbox has %d watches open; want 1 (its place given back)", n)
	}
}
