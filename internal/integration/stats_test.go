package integration

import (
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestStatsFollowRealUsage reads a real sandbox's usage through the API before and
// after it burns a second of CPU, holds 96 MiB, writes 24 MiB to its disk, opens TCP
// connections and sends a DNS query: every figure moves by what was done (the host
// kernel's accounting, sampled by the collector, which the test ticks itself). Another
// owner cannot read it, and suspended it answers zeros. With AIRLOCK_TEST_RUNTIME=runsc
// it checks the same of gVisor's sandboxes, whose cgroup holds the sentry.
func TestStatsFollowRealUsage(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Network: true, Owners: []string{"alice", "bob"},
		Config: func(c *manager.Config) { c.Usage.Interval = -1 }}) // the test samples
	alice, bob := n.As(t, "alice"), n.As(t, "bob")
	resp, err := alice.Create(background, api.CreateSandboxRequest{Name: "busy", Limits: api.Limits{CPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	sb := resp.Sandbox
	ses, err := alice.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(code string) {
		t.Helper()
		res, err := alice.Send(background, sb.Name, ses.ID, code)
		if err != nil || res.State != api.ExecSucceeded {
			t.Fatalf("send %q: %+v, %v", code, res, err)
		}
	}
	send("import os, socket, time")
	n.Manager.CollectUsage(background)
	before, err := alice.Stats(background, sb.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	send(`exec("t0 = time.process_time()\nwhile time.process_time() - t0 < 1.0: pass")`)
	send(`hold = b"x" * (96 << 20)`)
	send(`exec("f = open('/root/blob', 'wb')\nf.write(os.urandom(24 << 20))\nf.flush()\nos.fsync(f.fileno())\nf.close()")`)
	send(`l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); c = socket.create_connection(l.getsockname()); a, _ = l.accept()`)
	send(`exec("try: socket.getaddrinfo('stats-test.example', 80)\nexcept Exception: pass")`)
	n.Manager.CollectUsage(background)
	after, err := alice.Stats(background, sb.Name, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before %+v\nafter %+v", before, after)
	if d := after.CPU.UsageSeconds - before.CPU.UsageSeconds; d < 1.0 {
		t.Errorf("CPU time grew by %.2f s; want at least the 1 s burned", d)
	}
	if after.CPU.Cores <= 0 || after.CPU.LimitCores != 2 {
		t.Errorf("cpu = %+v; want cores in use > 0 and the limit 2", after.CPU)
	}
	if d := after.Memory.UsedBytes - before.Memory.UsedBytes; d < 90<<20 {
		t.Errorf("memory used grew by %d bytes; want at least 90 MiB of the 96 held", d)
	}
	if after.Memory.LimitBytes != 256<<20 || after.Memory.PeakBytes < after.Memory.UsedBytes {
		t.Errorf("memory = %+v; want limit 256 MiB and peak >= used", after.Memory)
	}
	if d := after.Disk.UsedBytes - before.Disk.UsedBytes; d < 20<<20 || after.Disk.LimitBytes < 900<<20 {
		t.Errorf("disk used grew by %d bytes, size %d; want at least 20 MiB of the 24 written, size about 1 GiB", d, after.Disk.LimitBytes)
	}
	// gVisor's sockets live in its own network stack: the host's namespace has none.
	if sb.Runtime != "runsc" && after.Network.Connections < 3 {
		t.Errorf("connections = %d; want at least 3 (a listener and both ends of a connection)", after.Network.Connections)
	}
	if after.Network.TxBytes <= before.Network.TxBytes || after.Network.RxBytes <= before.Network.RxBytes {
		t.Errorf("network before %+v after %+v; want both directions to grow after a DNS query", before.Network, after.Network)
	}
	if after.PIDs.Current < 2 || after.PIDs.Limit == 0 {
		t.Errorf("pids = %+v; want the agent and the session, and a limit", after.PIDs)
	}
	if len(after.History) != 2 {
		t.Errorf("history has %d samples; want the 2 taken", len(after.History))
	}

	for _, ref := range []string{sb.Name, sb.ID} {
		_, err := bob.Stats(background, ref, false)
		wantAPIError(t, "bob reads alice's stats "+ref, err, 404, "not_found")
	}
	if list, err := bob.AllStats(background, false); err != nil || len(list) != 0 {
		t.Errorf("bob's /v1/stats: %v, %v; want none of alice's", list, err)
	}

	if _, err := alice.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	got, err := alice.Stats(background, sb.Name, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "suspended" || got.CPU != (api.CPUStats{}) || got.Memory != (api.MemoryStats{}) || got.Network != (api.NetworkStats{}) || len(got.History) != 0 {
		t.Errorf("suspended: %+v; want its state and zeros", got)
	}
}
