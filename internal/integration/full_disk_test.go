package integration

import (
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestRestartOnAFullStateDisk: a daemon killed while its state disk is full starts
// again on that full disk, keeps its sandboxes, says clearly why a call that needs room
// fails, and works as before once there is room.
func TestRestartOnAFullStateDisk(t *testing.T) {
	d := startDaemonOn(t, ext4State(512<<20))
	d.must("create", "kept")
	d.must("exec", "kept", "--", "sh", "-c", "echo before > /root/f")
	d.must("snapshot", "create", "kept")
	d.must("create", "asleep")
	d.must("suspend", "asleep")

	free := fillDisk(t, d.stateMount)
	d.stop(syscall.SIGKILL)
	if !d.startWithin(60e9) {
		t.Fatalf("the daemon did not start on a full state disk:\n%s", d.logTail())
	}
	if sb := d.get("asleep"); sb.State != api.StateSuspended {
		t.Errorf("the suspended sandbox is %s after the restart; want suspended", sb.State)
	}
	// A new sandbox is refused; a running one may go on.
	if _, errOut, code := d.airlock("create", "no-room"); code == 0 || !fullDiskMessage(errOut) {
		t.Errorf("create on a full state disk: exit %d, %q; want it refused, saying the disk is full", code, errOut)
	}
	if _, errOut, code := d.airlock("exec", "kept", "--", "true"); code != 0 && !fullDiskMessage(errOut) {
		t.Errorf("exec on a full state disk: %q; want it to say the disk is full", errOut)
	}
	if out, errOut, _ := d.airlock("status"); !strings.Contains(out+errOut, "state disk") {
		t.Errorf("status on a full state disk does not name the state disk:\n%s%s", out, errOut)
	}

	free()
	d.must("create", "room-again")
	d.must("exec", "room-again", "--", "true")
	if out := d.must("exec", "kept", "--", "cat", "/root/f"); out != "before\n" {
		t.Errorf("after a restart on a full disk the sandbox reads %q; want its file", out)
	}
	d.must("exec", "asleep", "--", "true")
	d.must("rm", "room-again")
}

// fullDiskMessage reports whether an error says the disk is full.
func fullDiskMessage(msg string) bool {
	return strings.Contains(msg, "no space left") || strings.Contains(msg, "disk is full")
}
