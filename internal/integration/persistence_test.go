package integration

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestPersistenceMatrix checks DESIGN.md's persistence matrix across suspend/resume,
// one subtest per row, for the node's runtime: runc keeps files only; runsc keeps
// processes, memory and tmpfs too.
func TestPersistenceMatrix(t *testing.T) {
	n := testenv.NewNode(t)
	sb := n.Create(t, api.CreateSandboxRequest{Name: "matrix"})
	mustRun(t, n, sb.Name, `set -e
for d in /home/user /root /var/tmp /var/log /etc /opt; do echo kept > $d/matrix; done
for d in /tmp /run /dev/shm; do echo wiped > $d/matrix; done`)
	_, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "raw",
		Argv: []string{"sh", "-c", "echo ran >> /root/runs; exec sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, sb.Name, "sleep 0.2; cat /root/runs; pgrep -c sleep"); out != "ran\n1\n" {
		t.Fatalf("before suspend: %q; want the session's one run and its sleep", out)
	}
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	got, err := n.Client.Resume(background, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandbox.Generation != 2 {
		t.Errorf("generation after resume = %d; want 2", got.Sandbox.Generation)
	}
	keeps := got.Sandbox.Runtime == "runsc"
	if p := got.Sandbox.Persistence; p == nil || (p.Memory == "kept") != keeps {
		t.Errorf("runtime %s: persistence %+v; want memory %s", got.Sandbox.Runtime, p, map[bool]string{true: "kept", false: "lost"}[keeps])
	}

	t.Run("upper layer is kept", func(t *testing.T) {
		out := mustRun(t, n, sb.Name, "cat /home/user/matrix /root/matrix /var/tmp/matrix /var/log/matrix /etc/matrix /opt/matrix")
		if out != strings.Repeat("kept\n", 6) {
			t.Errorf("rootfs writes after resume: %q; want all six kept", out)
		}
	})
	t.Run("tmpfs is wiped, or kept with memory", func(t *testing.T) {
		out := mustRun(t, n, sb.Name, "ls -A /tmp /run /dev/shm | grep -c matrix || true")
		if want := map[bool]string{false: "0", true: "3"}[keeps]; strings.TrimSpace(out) != want {
			t.Errorf("tmpfs files after resume: %q; want %s", out, want)
		}
	})
	t.Run("processes are lost, or kept with memory, and nothing re-runs", func(t *testing.T) {
		out := mustRun(t, n, sb.Name, "pgrep -c sleep || true; cat /root/runs")
		if want := map[bool]string{false: "0\nran\n", true: "1\nran\n"}[keeps]; out != want {
			t.Errorf("after resume: %q; want %q (the sleep kept only with memory, the command run once)", out, want)
		}
		sessions, err := n.Client.ListSessions(background, sb.Name)
		if err != nil || len(sessions) != btoi(keeps) {
			t.Errorf("sessions after resume = %v, %v; want %d", sessions, err, btoi(keeps))
		}
	})
	t.Run("terminate deletes the upper layer", func(t *testing.T) {
		if _, err := n.Client.Terminate(background, sb.Name); err != nil {
			t.Fatal(err)
		}
		if err := n.Manager.WaitCleanups(background); err != nil { // the rest goes after the answer
			t.Fatal(err)
		}
		if left := testenv.SandboxMountsUnder(n.Dir); len(left) > 0 {
			t.Errorf("mounts left after terminate: %v", left)
		}
		entries, _ := readDirNames(n.Dir + "/sb")
		for _, e := range entries {
			if e == sb.ID {
				t.Errorf("the sandbox's directory (upper layer) is still there after terminate")
			}
		}
	})
}
