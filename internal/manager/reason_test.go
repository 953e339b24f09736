package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestFailuresSayWhy: a start that fails because of the node's state says so to the
// caller, and names no host path; a failure of unknown cause says no more than before.
func TestFailuresSayWhy(t *testing.T) {
	m, fd, _ := newTestManager(t)
	ctx := context.Background()
	full := &os.PathError{Op: "mkdir", Path: "/srv/airlock/state/sandboxes/sb_x", Err: syscall.ENOSPC}
	net := fmt.Errorf("the network: %w", errdefs.Unavailable("the network of sandbox %q could not be set up", "c").
		WithCause(errdefs.Unavailable("netns: no free sandbox link left in 10.0.0.0/24")))
	for _, tc := range []struct {
		name  string
		cause error
		want  string
	}{
		{"a", full, `sandbox "a" could not start: the node's disk is full`},
		{"b", errors.New("runc exploded at /srv/airlock"), `sandbox "b" could not start`},
		{"c", net, `sandbox "c" could not start: the network of sandbox "c" could not be set up: netns: no free sandbox link left in 10.0.0.0/24`},
		{"d", fmt.Errorf("mount /dev/loop3: %w", syscall.EBADMSG), `sandbox "d" could not start: a file system on the node is damaged`},
	} {
		fd.FailNextStart(tc.cause)
		op, _, err := m.Create(ctx, local, CreateRequest{Name: tc.name})
		if got := errdefs.Message(err); got != tc.want || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("create failing with %v: %v, %q; want unavailable, %q", tc.cause, err, got, tc.want)
		}
		if op == nil || op.ErrorMessage != tc.want {
			t.Errorf("create failing with %v: its operation says %+v; want %q", tc.cause, op, tc.want)
		}
	}

	// An operation that fails on a full disk is no internal error: the node is full.
	op, _, err := m.beginOp(ctx, local, "snapshot", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = m.finishOp(op, "", fmt.Errorf("store chunk: %w", full))
	if want := "the snapshot failed: the node's disk is full"; !errors.Is(err, errdefs.ErrUnavailable) || errdefs.Message(err) != want || op.ErrorMessage != want {
		t.Errorf("snapshot failing on a full disk: %v, %q, operation says %q; want unavailable, %q", err, errdefs.Message(err), op.ErrorMessage, want)
	}
	for _, s := range []string{errdefs.Message(err), op.ErrorMessage} {
		if strings.Contains(s, "/srv") {
			t.Errorf("the caller hears a host path: %q", s)
		}
	}
}
