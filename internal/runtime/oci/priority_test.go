package oci_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestBackgroundStartsIdleUntilForeground: a sandbox started with Spec.Background runs
// its agent (every thread of it) at idle CPU priority; after Foreground none of its
// tasks is, and a sandbox started without it never was.
func TestBackgroundStartsIdleUntilForeground(t *testing.T) {
	h, d, dir := testenv.DriverHarness(t, nil)
	ctx := context.Background()
	policies := func(id string) map[uint32]int {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "sb", id, "ctl", "init.pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(b))
		tasks, err := os.ReadDir(filepath.Join("/proc", pid, "task"))
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32]int{}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
				out[attr.Policy]++
			}
		}
		return out
	}
	start := func(name string, background bool) string {
		t.Helper()
		id := name + filepath.Base(dir)[len("al-oci-"):]
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		spec := h.Spec(id)
		spec.Background = background
		if err := d.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		return id
	}
	bg := start("sbidle", true)
	if p := policies(bg); p[unix.SCHED_IDLE] == 0 || p[unix.SCHED_NORMAL] != 0 {
		t.Errorf("a background sandbox's agent tasks by policy: %v; want all at idle (%d)", p, unix.SCHED_IDLE)
	}
	if err := runtime.Foregrounder(d).Foreground(ctx, bg); err != nil {
		t.Fatal(err)
	}
	if p := policies(bg); p[unix.SCHED_IDLE] != 0 || p[unix.SCHED_NORMAL] == 0 {
		t.Errorf("after Foreground the agent's tasks by policy: %v; want none at idle", p)
	}
	fg := start("sbnormal", false)
	if p := policies(fg); p[unix.SCHED_IDLE] != 0 {
		t.Errorf("a sandbox started normally has tasks at idle priority: %v", p)
	}
}
