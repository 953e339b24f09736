package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/testenv"
)

func TestConformance(t *testing.T) {
	e := gvisor.Engine(testenv.Runsc(t))
	h, _, _ := testenv.DriverHarness(t, &e)
	drivertest.Run(t, h)
	drivertest.RunHostile(t, h)
}

// A start that fails inside runsc's own processes says why in its error: the last lines
// of runsc's gofer and boot logs, not only "cannot read client sync file".
func TestFailedStartQuotesRunscLogs(t *testing.T) {
	e := gvisor.Engine(testenv.Runsc(t))
	h, _, _ := testenv.DriverHarness(t, &e)
	// The sandbox's uid cannot pass through the driver's root to its own: the gofer,
	// which opens the root as that uid, fails.
	if err := os.Chmod(filepath.Join(h.HostDirs[0], "sb"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := h.Driver.Start(ctx, h.Spec("sb_badroot"))
	t.Cleanup(func() {
		if err := h.Driver.Delete(ctx, "sb_badroot"); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	if err == nil {
		t.Fatal("a sandbox whose root its uid cannot reach started")
	}
	msg := err.Error()
	for _, want := range []string{"runsc gofer.log, last lines:", "self-bind-mounting rootfs", "runsc boot.log, last lines:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the start's error does not say %q:\n%s", want, msg)
		}
	}
	if len(msg) > 16<<10 {
		t.Errorf("the start's error is %d bytes; want it bounded (under 16 KiB)", len(msg))
	}
}
