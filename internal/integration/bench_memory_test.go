package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// BenchmarkMemoryResume measures suspend that keeps memory under runsc, side by side with
// a cold create, on one daemon (run it in the runsc stage, alone):
//
//	AIRLOCK_TEST_RUNTIME=runsc go test ./internal/integration -run '^$' -bench MemoryResume -benchtime 1x
//
// cold_ms: create → first exec result; suspend_ms: suspend of a sandbox whose Python
// REPL holds 50 MiB; resume_ms: resume → the REPL's first answer (its variables kept);
// image_MiB and rss_MiB: the memory image on disk and the REPL's resident memory.
func BenchmarkMemoryResume(b *testing.B) {
	if os.Getenv("AIRLOCK_TEST_RUNTIME") != "runsc" {
		b.Skip("runs on runsc: AIRLOCK_TEST_RUNTIME=runsc")
	}
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 7
	var cold, suspend, resume []time.Duration
	var image, rss float64
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("memb-%d", i)
		cold = append(cold, createExec(b, cl, name))
		ses, err := cl.StartSession(ctx, name, api.SessionRequest{Kind: "python"})
		if err != nil {
			b.Fatal(err)
		}
		res, err := cl.Send(ctx, name, ses.ID, "import resource; blob = bytearray(b'\\x01') * (50 << 20); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
		if err != nil || res.State != api.ExecSucceeded {
			b.Fatalf("send: %+v, %v", res, err)
		}
		kb, _ := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
		rss += kb / 1024 / n
		t0 := time.Now()
		if _, err := cl.Suspend(ctx, name); err != nil {
			b.Fatal(err)
		}
		suspend = append(suspend, time.Since(t0))
		sb, err := cl.Get(ctx, name)
		if err != nil || sb.Persistence == nil || !sb.Persistence.MemoryKept {
			b.Fatalf("the suspend kept no memory: %+v, %v", sb, err)
		}
		image += float64(sb.Persistence.MemoryBytes) / (1 << 20) / n
		t0 = time.Now()
		if _, err := cl.Resume(ctx, name); err != nil {
			b.Fatal(err)
		}
		if res, err := cl.Send(ctx, name, ses.ID, "len(blob)"); err != nil || res.Stdout != fmt.Sprintln(50<<20) {
			b.Fatalf("the REPL after resume: %+v, %v", res, err)
		}
		resume = append(resume, time.Since(t0))
		cl.Terminate(ctx, name)
	}
	c, s, r := p50(cold), p50(suspend), p50(resume)
	b.ReportMetric(c, "cold_ms")
	b.ReportMetric(s, "suspend_ms")
	b.ReportMetric(r, "resume_ms")
	b.ReportMetric(r/c, "resume/cold")
	b.ReportMetric(image, "image_MiB")
	b.ReportMetric(rss, "rss_MiB")
}

// BenchmarkMemoryFork measures fork into a running clone under runsc, side by side with
// a cold create, on one daemon (run it in the runsc stage, alone):
//
//	AIRLOCK_TEST_RUNTIME=runsc go test ./internal/integration -run '^$' -bench MemoryFork -benchtime 1x
//
// cold_ms: create → first exec result; fork_ms: fork of a running sandbox whose Python
// REPL holds 50 MiB → the clone's REPL's first answer (its variables there);
// fork_small_ms: the same of a sandbox whose REPL holds next to nothing;
// snapfork_ms: a fork of a snapshot of the 50 MiB one taken with its memory;
// snapshot_ms: that snapshot (the source frozen, memory and files saved);
// fork_call_ms: the fork call alone (the clone running), over all three kinds.
func BenchmarkMemoryFork(b *testing.B) {
	if os.Getenv("AIRLOCK_TEST_RUNTIME") != "runsc" {
		b.Skip("runs on runsc: AIRLOCK_TEST_RUNTIME=runsc")
	}
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 7
	source := func(name, fill string) string {
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		ses, err := cl.StartSession(ctx, name, api.SessionRequest{Kind: "python"})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := cl.Send(ctx, name, ses.ID, fill); err != nil || res.State != api.ExecSucceeded {
			b.Fatalf("send: %+v, %v", res, err)
		}
		return ses.ID
	}
	big := source("forkb-big", "blob = bytearray(b'\\x01') * (50 << 20)")
	defer cl.Terminate(ctx, "forkb-big")
	small := source("forkb-small", "blob = bytearray(b'\\x01') * 4")
	defer cl.Terminate(ctx, "forkb-small")
	t0 := time.Now()
	snap, err := cl.SnapshotWith(ctx, "forkb-big", api.SnapshotRequest{Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	snapshot := time.Since(t0)
	defer cl.DeleteSnapshot(ctx, snap.Snapshot.ID)
	var call []time.Duration
	clone := func(src, ses, name string, size int) time.Duration {
		t0 := time.Now()
		if _, err := cl.Fork(ctx, src, api.ForkRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		call = append(call, time.Since(t0))
		if res, err := cl.Send(ctx, name, ses, "len(blob)"); err != nil || res.Stdout != fmt.Sprintln(size) {
			b.Fatalf("the clone's REPL: %+v, %v", res, err)
		}
		d := time.Since(t0)
		cl.Terminate(ctx, name)
		return d
	}
	var cold, fork, forkSmall, snapfork []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("forkb-cold-%d", i)
		cold = append(cold, createExec(b, cl, name))
		cl.Terminate(ctx, name)
		fork = append(fork, clone("forkb-big", big, fmt.Sprintf("forkb-live-%d", i), 50<<20))
		forkSmall = append(forkSmall, clone("forkb-small", small, fmt.Sprintf("forkb-small-%d", i), 4))
		snapfork = append(snapfork, clone(snap.Snapshot.ID, big, fmt.Sprintf("forkb-snap-%d", i), 50<<20))
	}
	b.ReportMetric(p50(cold), "cold_ms")
	b.ReportMetric(p50(fork), "fork_ms")
	b.ReportMetric(p50(call), "fork_call_ms")
	b.ReportMetric(p50(forkSmall), "fork_small_ms")
	b.ReportMetric(p50(snapfork), "snapfork_ms")
	b.ReportMetric(float64(snapshot.Milliseconds()), "snapshot_ms")
	b.ReportMetric(float64(snap.Snapshot.Memory.Bytes)/(1<<20), "image_MiB")
}

// createExec creates the sandbox name and runs a first command in it, and returns how
// long that took (a cold start).
func createExec(b *testing.B, cl *client.Client, name string) time.Duration {
	ctx := context.Background()
	t0 := time.Now()
	if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
		b.Fatal(err)
	}
	if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}
