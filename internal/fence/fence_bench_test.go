package fence

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkFence times a fenced true, each way, and the floor of WayReexec (this
// binary starting again), each against a plain exec of /bin/true run in turn with it, so
// that both see the same load on a shared machine. It reports the medians as p50-ns and
// plain-p50-ns, and their difference as added-p50-ns; ns/op covers both runs.
// WayThread and WayDaemon need root (the daemon's side is this process, its caller
// nobody); the other cases run for anyone.
func BenchmarkFence(b *testing.B) {
	requireFence(b)
	dir := b.TempDir()
	ws, scratch := filepath.Join(dir, "ws"), filepath.Join(dir, "scratch")
	for _, p := range []string{ws, scratch} {
		if err := os.Mkdir(p, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	// The daemon's caller, nobody, must reach the workspace.
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	var sock string
	if fenceThreadCapable() {
		sock = startFenceServer(b)
	}
	plain := func(name string, args ...string) func() error {
		return func() error {
			cmd := exec.Command(name, args...)
			cmd.Dir = ws
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
	}
	fenced := func(f Fence) func() error {
		return func() error {
			cmd, err := f.Command(context.Background(), []string{"true"})
			if err != nil {
				return err
			}
			var out bytes.Buffer
			cmd.Dir, cmd.Stdout, cmd.Stderr = ws, &out, &out
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %v: %s", cmd.Way(), err, out.Bytes())
			}
			return nil
		}
	}
	cases := []struct {
		name   string
		thread bool
		run    func() error
	}{
		{"thread", true, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch})},
		{"thread-network", true, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch, Network: true})},
		{"reexec-floor", false, plain("/proc/self/exe", fenceProbe, "open", "/")},
		{"reexec", false, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch, forceReexec: true})},
		{"reexec-network", false, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch, Network: true, forceReexec: true})},
		// Anyone else, with a daemon: the daemon is this process, the caller nobody.
		{"daemon", true, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch, Daemon: sock, forceDaemon: true, dial: dialAs(fenceTestUID, fenceTestGID)})},
		{"daemon-network", true, fenced(Fence{Workspace: ws, Access: "rw", Scratch: scratch, Network: true, Daemon: sock, forceDaemon: true, dial: dialAs(fenceTestUID, fenceTestGID)})},
	}
	unfenced := plain("/bin/true")
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.thread {
				requireFenceThread(b)
			}
			var took, base []time.Duration
			for b.Loop() {
				for _, r := range []struct {
					run func() error
					d   *[]time.Duration
				}{{unfenced, &base}, {c.run, &took}} {
					start := time.Now()
					if err := r.run(); err != nil {
						b.Fatal(err)
					}
					*r.d = append(*r.d, time.Since(start))
				}
			}
			got, want := p50(took), p50(base)
			b.ReportMetric(float64(got.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(want.Nanoseconds()), "plain-p50-ns")
			b.ReportMetric(float64((got - want).Nanoseconds()), "added-p50-ns")
		})
	}
}
