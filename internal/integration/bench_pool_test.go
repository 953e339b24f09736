package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// BenchmarkPoolCreateFirstExec: create → first exec result through the API when a warm
// pool serves the create, against a cold create of the same sandbox and against a bare
// `runc run` of /usr/bin/true, in the same run (target: pooled p50 at most 10 ms).
//
//	go test ./internal/integration -run '^$' -bench PoolCreateFirstExec -benchtime 1x
func BenchmarkPoolCreateFirstExec(b *testing.B) {
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 20
	if _, err := cl.SetPool(ctx, "bench", api.PoolRequest{Size: 4}); err != nil {
		b.Fatal(err)
	}
	removed := false
	b.Cleanup(func() {
		if !removed {
			cl.DeletePool(context.Background(), "bench")
		}
	})
	createExec := func(name string) time.Duration {
		t0 := time.Now()
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		if _, err := cl.Terminate(ctx, name); err != nil {
			b.Fatal(err)
		}
		return took
	}
	var pooled, cold, runc []time.Duration
	for i := range n {
		waitReady(b, cl, "bench")
		pooled = append(pooled, createExec(fmt.Sprintf("pool-%d", i)))
	}
	pools, _ := cl.Pools(ctx)
	if len(pools) != 1 || pools[0].Hits != n {
		b.Fatalf("pool after %d creates: %+v; want %d hits", n, pools, n)
	}
	refill := pools[0].RefillAvgMS
	if err := cl.DeletePool(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	removed = true
	for i := range n {
		cold = append(cold, createExec(fmt.Sprintf("cold-%d", i)))
	}
	bundle := runcBundle(b)
	for i := range n {
		t0 := time.Now()
		if out, err := exec.Command("runc", "run", "--bundle", bundle, fmt.Sprintf("albench-pool-%d-%d", os.Getpid(), i)).CombinedOutput(); err != nil {
			b.Fatalf("runc run: %v: %s", err, out)
		}
		runc = append(runc, time.Since(t0))
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"pooled", pooled}, {"cold", cold}, {"runc", runc}} {
		p50, p90 := quantiles(m.ds)
		b.ReportMetric(p50, m.name+"-p50-ms")
		b.ReportMetric(p90, m.name+"-p90-ms")
	}
	b.ReportMetric(refill, "refill-avg-ms")
}

// waitReady waits (untimed) until pool name has a ready member.
func waitReady(b *testing.B, cl *client.Client, name string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if pools, err := cl.Pools(context.Background()); err == nil && len(pools) == 1 && pools[0].Ready > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("pool %s has no ready member after 2 minutes", name)
}

// quantiles are the p50 and p90 of ds in milliseconds.
func quantiles(ds []time.Duration) (p50, p90 float64) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ms(ds[len(ds)/2]), ms(ds[len(ds)*9/10])
}

// runcBundle makes a bundle that runs /usr/bin/true from the host's /usr, read-only,
// with runc's default namespaces: the floor any container create pays.
func runcBundle(b *testing.B) string {
	dir := b.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(rootfs, l)); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		b.Fatal(err)
	}
	proc := spec["process"].(map[string]any)
	proc["args"], proc["terminal"] = []any{"/usr/bin/true"}, false
	spec["mounts"] = append(spec["mounts"].([]any), map[string]any{"destination": "/usr", "type": "bind", "source": "/usr", "options": []any{"rbind", "ro"}})
	if data, err = json.Marshal(spec); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}
