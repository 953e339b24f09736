package gvisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
)

// The status check starts a test sandbox once per probeEvery, again after a start
// failed, and is degraded while the test sandbox or the last start failed.
func TestStartHealthProbes(t *testing.T) {
	var h startHealth
	probes := 0
	var probeErr error
	probe := func(context.Context) error { probes++; return probeErr }
	check := func() runtime.Check {
		c := runtime.Check{Name: "runtime runsc", OK: true, Detail: "runsc"}
		h.check(context.Background(), &c, probe)
		return c
	}
	steps := []struct {
		name       string
		before     func()
		wantProbes int
		wantOK     bool
		wantDetail string
	}{
		{"first check", nil, 1, true, "a test sandbox started"},
		{"cached", nil, 1, true, "a test sandbox started"},
		{"a start failed", func() {
			h.record(errors.New("runsc run: EOF\n  W1 util.go:107] FATAL ERROR: self-bind-mounting rootfs: permission denied"))
		}, 2, false,
			"the last sandbox start failed at"},
		{"the reason is quoted", nil, 2, false, "self-bind-mounting rootfs: permission denied"},
		{"a start worked", func() { h.record(nil) }, 2, true, "a test sandbox started"},
		{"the probe is old", func() { h.probedAt = time.Now().Add(-probeEvery - time.Second); probeErr = errors.New("boom") }, 3, false,
			"a test sandbox failed to start at"},
		{"a start worked where the probe failed", func() { probeErr = nil; h.record(nil) }, 4, true, "a test sandbox started"},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		c := check()
		if probes != s.wantProbes || c.OK != s.wantOK || !strings.Contains(c.Detail, s.wantDetail) || (c.OK != (c.Degrades == "")) {
			t.Errorf("%s: %d probes, %+v; want %d probes, OK %v, detail saying %q", s.name, probes, c, s.wantProbes, s.wantOK, s.wantDetail)
		}
	}
}

// A sandbox start records its outcome while a status probe runs, without waiting for
// it; a start that fails meanwhile makes the next check probe again.
func TestStartHealthRecordDoesNotWaitForAProbe(t *testing.T) {
	var h startHealth
	inProbe, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := runtime.Check{OK: true}
		h.check(context.Background(), &c, func(context.Context) error { close(inProbe); <-release; return nil })
	}()
	<-inProbe
	recorded := make(chan struct{})
	go func() { h.record(errors.New("boom")); close(recorded) }()
	select {
	case <-recorded:
	case <-done:
		t.Fatal("the probe ended first")
	}
	close(release)
	<-done
	probes := 0
	c := runtime.Check{OK: true}
	h.check(context.Background(), &c, func(context.Context) error { probes++; return nil })
	if probes != 1 || c.OK {
		t.Fatalf("after a start failed during a probe: %d probes, ok=%v; want a new probe and the failure shown", probes, c.OK)
	}
}
