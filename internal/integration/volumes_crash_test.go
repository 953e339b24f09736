package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/failpoint"
)

// TestVolumesSurviveAKilledDaemon kills the daemon (SIGKILL, at a crash point) in the
// middle of an attach (the volume's lease recorded, the sandbox's record not yet) and
// of a resize (the new size recorded, the host not yet grown). After each restart
// nothing is half made: the attach left no lease (a second attach works), the grow is
// finished, and what the volume held is still there and seen at its new size inside.
func TestVolumesSurviveAKilledDaemon(t *testing.T) {
	var d *daemon
	releaseVolumes(t, func() string {
		if d == nil {
			return ""
		}
		return filepath.Join(d.dir, "state", "volumes")
	})
	d = startDaemonB(t)
	t.Cleanup(func() { // a failed test's: the daemon's own cleanup follows
		if d.cmd == nil {
			d.start()
		}
		d.airlock("rm", "sb")
		for _, v := range []string{"v", "v2"} {
			d.airlock("volume", "rm", v, "--yes")
		}
	})
	volume := func(name string) api.Volume {
		t.Helper()
		var v api.Volume
		if err := json.Unmarshal([]byte(d.must("volume", "get", name, "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	d.must("volume", "create", "v", "--size", "32M")
	d.must("volume", "create", "v2", "--size", "16M")
	d.must("create", "sb", "--volume", "v:/data")
	d.must("exec", "sb", "--", "sh", "-c", "echo kept > /data/f && sync")
	d.must("suspend", "sb")

	d.stop(syscall.SIGTERM)
	d.env = []string{failpoint.EnvVar + "=volume.attach-leased,volume.resize-recorded,volume.create-made"}
	d.start()

	// A create broken off between the host's volume and its record.
	if _, errOut, code := d.airlock("volume", "create", "v3", "--size", "16M"); code == 0 {
		t.Fatalf("the create succeeded past its crash point: %s", errOut)
	}
	if !d.killed(30 * time.Second) {
		t.Fatal("the daemon was not killed in the create")
	}
	d.start()
	if out, _, code := d.airlock("volume", "get", "v3"); code == 0 {
		t.Errorf("after a crash in the create the volume is there: %s", out)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.dir, "state", "volumes")); len(entries) != 3 { // v, v2, binds
		t.Errorf("after a crash in the create the volumes directory holds %d entries; want 3 (v, v2, binds)", len(entries))
	}

	// An attach broken off between the volume's record and the sandbox's.
	if _, errOut, code := d.airlock("volume", "attach", "v2", "--sandbox", "sb", "--path", "/v2"); code == 0 {
		t.Fatalf("the attach succeeded past its crash point: %s", errOut)
	}
	if !d.killed(30 * time.Second) {
		t.Fatal("the daemon was not killed in the attach")
	}
	d.start()
	if v := volume("v2"); len(v.Attachments) != 0 {
		t.Errorf("after a crash in the attach the volume is attached: %+v", v.Attachments)
	}
	if sb := d.get("sb"); len(sb.Volumes) != 1 || sb.Volumes[0].Name != "v" {
		t.Errorf("after a crash in the attach the sandbox has volumes %+v; want v alone", sb.Volumes)
	}

	// A resize broken off between its record and the host's grow.
	if _, errOut, code := d.airlock("volume", "resize", "v", "--size", "64M"); code == 0 {
		t.Fatalf("the resize succeeded past its crash point: %s", errOut)
	}
	if !d.killed(30 * time.Second) {
		t.Fatal("the daemon was not killed in the resize")
	}
	d.env = nil
	d.start()
	if v := volume("v"); v.Size != 64<<20 || v.GrowTo != 0 {
		t.Errorf("after a crash in the resize the volume is size %d grow_to %d; want %d, grown", v.Size, v.GrowTo, 64<<20)
	}

	// The lease is free (a writer attaches), and the data is whole at the new size.
	d.must("volume", "attach", "v2", "--sandbox", "sb", "--path", "/v2")
	out := d.must("exec", "sb", "--", "sh", "-c", "cat /data/f; df -B1 --output=size /data | tail -1; echo w > /v2/w && cat /v2/w")
	lines := strings.Fields(out)
	if len(lines) != 3 || lines[0] != "kept" || lines[2] != "w" {
		t.Fatalf("after the crashes the sandbox reads %q; want kept, a size, w", out)
	}
	if total, _ := strconv.ParseInt(lines[1], 10, 64); total < 48<<20 {
		t.Errorf("df inside says %s bytes; want about %d", lines[1], 64<<20)
	}
	// A daemon killed while the sandbox runs: the sandbox keeps its volumes, and the
	// restart's recovery leaves their mounts in place.
	d.stop(syscall.SIGKILL)
	d.start()
	if out := d.must("exec", "sb", "--", "sh", "-c", "cat /data/f /v2/w; echo again >> /data/f && tail -1 /data/f"); out != "kept\nw\nagain\n" {
		t.Errorf("after a daemon restart the running sandbox reads %q; want kept, w, again", out)
	}
	d.must("rm", "sb")
	d.must("volume", "rm", "v", "--yes")
	d.must("volume", "rm", "v2", "--yes")
}
