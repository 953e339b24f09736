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
		t0 := time.Now()
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(t0))
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
		t0 = time.Now()
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
// snapfork_ms: the same from a snapshot taken with its memory; snapshot_ms: that
// snapshot (the source frozen, memory and files saved).
func BenchmarkMemoryFork(b *testing.B) {
	if os.Getenv("AIRLOCK_TEST_RUNTIME") != "runsc" {
		b.Skip("runs on runsc: AIRLOCK_TEST_RUNTIME=runsc")
	}
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 7
	if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: "forkb-src"}); err != nil {
		b.Fatal(err)
	}
	defer cl.Terminate(ctx, "forkb-src")
	ses, err := cl.StartSession(ctx, "forkb-src", api.SessionRequest{Kind: "python"})
	if err != nil {
		b.Fatal(err)
	}
	if res, err := cl.Send(ctx, "forkb-src", ses.ID, "blob = bytearray(b'\\x01') * (50 << 20)"); err != nil || res.State != api.ExecSucceeded {
		b.Fatalf("send: %+v, %v", res, err)
	}
	t0 := time.Now()
	snap, err := cl.SnapshotWith(ctx, "forkb-src", api.SnapshotRequest{Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	snapshot := time.Since(t0)
	defer cl.DeleteSnapshot(ctx, snap.Snapshot.ID)
	clone := func(src, name string) time.Duration {
		t0 := time.Now()
		if _, err := cl.Fork(ctx, src, api.ForkRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if res, err := cl.Send(ctx, name, ses.ID, "len(blob)"); err != nil || res.Stdout != fmt.Sprintln(50<<20) {
			b.Fatalf("the clone's REPL: %+v, %v", res, err)
		}
		d := time.Since(t0)
		cl.Terminate(ctx, name)
		return d
	}
	var cold, fork, snapfork []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("forkb-cold-%d", i)
		t0 := time.Now()
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(t0))
		cl.Terminate(ctx, name)
		fork = append(fork, clone("forkb-src", fmt.Sprintf("forkb-live-%d", i)))
		snapfork = append(snapfork, clone(snap.Snapshot.ID, fmt.Sprintf("forkb-snap-%d", i)))
	}
	b.ReportMetric(p50(cold), "cold_ms")
	b.ReportMetric(p50(fork), "fork_ms")
	b.ReportMetric(p50(snapfork), "snapfork_ms")
	b.ReportMetric(float64(snapshot.Milliseconds()), "snapshot_ms")
	b.ReportMetric(float64(snap.Snapshot.Memory.Bytes)/(1<<20), "image_MiB")
}
