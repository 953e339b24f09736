package integration

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestDiskLimits: a full upper layer or tmpfs gives the writer ENOSPC and leaves other
// sandboxes untouched; the writes that fit survive a suspend.
func TestDiskLimits(t *testing.T) {
	n := testenv.NewNode(t)
	small := n.Create(t, api.CreateSandboxRequest{Name: "disk-small", Limits: api.Limits{Disk: 64 << 20}})
	other := n.Create(t, api.CreateSandboxRequest{Name: "disk-other"})

	res := run(t, n, small.Name, "dd if=/dev/zero of=/root/big bs=1M count=200 2>&1; echo rc=$?")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") {
		t.Errorf("writing 200 MiB into a 64 MiB upper layer: %q; want ENOSPC and a failing dd", res.Stdout)
	}
	res = run(t, n, small.Name, "(head -c 100M /dev/zero > /tmp/big) 2>&1; echo rc=$?")
	if !strings.Contains(res.Stdout, "No space left on device") {
		t.Errorf("writing 100 MiB into the 64 MiB /tmp: %q; want ENOSPC", res.Stdout)
	}
	if out := mustRun(t, n, other.Name, "head -c 100M /dev/zero > /root/f && wc -c < /root/f"); strings.TrimSpace(out) != "104857600" {
		t.Errorf("the other sandbox could not write 100 MiB: %q", out)
	}
	// The small sandbox still works once space is freed, and what fits survives a suspend.
	mustRun(t, n, small.Name, "rm -f /root/big /tmp/big && echo ok > /root/kept")
	if _, err := n.Client.Suspend(background, small.Name); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, small.Name, "cat /root/kept"); out != "ok\n" {
		t.Errorf("after suspend and resume /root/kept = %q", out)
	}
	_, err := n.Client.Create(background, api.CreateSandboxRequest{Name: "disk-tiny", Limits: api.Limits{Disk: 1 << 20}})
	wantAPIError(t, "a 1 MiB disk cap", err, 400, "invalid_argument")
}
