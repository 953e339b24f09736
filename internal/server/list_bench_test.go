package server_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkListSuspended20k lists 20,000 suspended sandboxes through the API end to
// end (the Go SDK over the node's unix socket, every page of 1,000 decoded), from a
// node whose store holds them: records made from a real create's, suspended, on a node
// of their own (so this node's sweep, which finds no files for them, leaves them). Reports
// the whole listing's p50 and the first page's (target: the whole listing under 100 ms),
// and the CPU time the process (server and client both) spent on a whole listing, p50:
// on a shared machine that moves less with the load than the wall time does.
func BenchmarkListSuspended20k(b *testing.B) {
	const n = 20000
	node := testenv.NewFakeNode(b, testenv.FakeOptions{})
	ctx := context.Background()
	resp, err := node.Client.Create(ctx, api.CreateSandboxRequest{Name: "model"})
	if err != nil {
		b.Fatal(err)
	}
	model, err := node.Store.GetSandbox(ctx, resp.Sandbox.ID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := node.Client.Terminate(ctx, "model"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { // the node's own cleanup would terminate each of them
		for i := range n {
			node.Store.DeleteSandbox(context.Background(), fmt.Sprintf("sb_list%013d", i))
		}
	})
	at := time.Now().Add(-time.Hour)
	for i := range n {
		sb := *model
		sb.ID, sb.Name, sb.State = fmt.Sprintf("sb_list%013d", i), fmt.Sprintf("s%d", i), store.State(api.StateSuspended)
		sb.CreatedAt, sb.UpdatedAt, sb.LastActivity = at, at, at
		sb.Version = 0
		sb.Node = "elsewhere" // this node's loops (sweep, recovery) act on its own sandboxes only
		at = at.Add(time.Millisecond)
		if err := node.Store.CreateSandbox(ctx, &sb); err != nil {
			b.Fatal(err)
		}
	}
	opts := client.ListOptions{States: []string{string(api.StateSuspended)}}
	var whole, first, cpu []float64
	b.ResetTimer()
	for range max(b.N, 15) {
		t0, c0 := time.Now(), processCPU(b)
		list, err := node.Client.List(ctx, opts)
		whole = append(whole, float64(time.Since(t0))/float64(time.Millisecond))
		cpu = append(cpu, float64(processCPU(b)-c0)/float64(time.Millisecond))
		if err != nil || len(list) != n {
			all, _ := node.Store.ListSandboxes(ctx, store.SandboxFilter{States: []store.State{store.State(api.StateSuspended)}})
			seen := map[string]int{}
			for _, sb := range list {
				seen[sb.ID]++
			}
			dup := 0
			for _, c := range seen {
				if c > 1 {
					dup++
				}
			}
			b.Fatalf("listed %d of %d (store has %d suspended; %d distinct, %d listed twice): %v", len(list), n, len(all), len(seen), dup, err)
		}
		t0 = time.Now()
		if _, _, err := node.Client.ListPage(ctx, opts, ""); err != nil {
			b.Fatal(err)
		}
		first = append(first, float64(time.Since(t0))/float64(time.Millisecond))
	}
	b.StopTimer()
	b.ReportMetric(median(whole), "all-20k-p50-ms")
	b.ReportMetric(median(cpu), "all-20k-cpu-p50-ms")
	b.ReportMetric(median(first), "first-page-p50-ms")
}

// processCPU is the user and system CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
