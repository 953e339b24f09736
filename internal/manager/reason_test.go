package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
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

// TestFullStateDiskRefusesStarts: below the state disk's floor a create, and a resume,
// are refused with a clear error before anything is recorded, running sandboxes are
// left alone, and the health report says why.
func TestFullStateDiskRefusesStarts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	fd := newFake(t)
	m, st := newManagerWith(t, cfg, fd)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "up"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Suspend(ctx, local, "up"); err != nil {
		t.Fatal(err)
	}
	ops, _ := st.ListOperations(ctx, store.OperationFilter{})

	m.cfg.MinFreeStateDisk = 1 << 62 // more than any disk has
	_, _, err := m.Create(ctx, local, CreateRequest{Name: "new"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "the node's disk is full") {
		t.Errorf("create on a full state disk: %v; want unavailable, saying the disk is full", err)
	}
	if _, _, err := m.Resume(ctx, local, "up"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("resume on a full state disk: %v; want unavailable", err)
	}
	if sb, err := m.Resolve(ctx, local.Owner, "up"); err != nil || sb.State != Suspended {
		t.Errorf("after a refused resume: %+v, %v; want it suspended", sb, err)
	}
	if _, err := m.Resolve(ctx, local.Owner, "new"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused create left a sandbox: %v", err)
	}
	if now, _ := st.ListOperations(ctx, store.OperationFilter{}); len(now) != len(ops)+1 { // the resume's, failed
		t.Errorf("%d operations after a refused create and resume; want %d", len(now), len(ops)+1)
	}
	checks := m.Health(ctx, "", nil).Checks
	i := slices.IndexFunc(checks, func(c runtime.Check) bool { return c.Name == "state disk" })
	if i < 0 || checks[i].OK || checks[i].Degrades == "" {
		t.Errorf("health on a full state disk: %+v; want a failing state disk check", checks)
	}

	m.cfg.MinFreeStateDisk = 1
	if _, _, err := m.Resume(ctx, local, "up"); err != nil {
		t.Errorf("resume with room: %v", err)
	}
}
