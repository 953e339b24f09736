// Package drivertest is the conformance suite every runtime.Driver runs: start, agent
// reachability, stats, stop keeping the upper layer, restart, delete, failed starts that
// leave nothing, the network hook, listing and (when supported) killing ahead of Delete
// and freezing (Run), and for
// every driver that isolates sandboxes, the hostile suite (RunHostile). It must not
// depend on any one driver's internals.
package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/runtime"
)

// Harness gives the suite a driver and specs that run on it.
type Harness struct {
	Driver runtime.Driver
	// Spec returns a runnable spec for a new sandbox id.
	Spec func(id string) runtime.Spec
	// HostDirs are host directories (the driver's state) whose paths sandbox code must
	// not be able to see.
	HostDirs []string
	// Leftovers lists host resources (mounts, directories...) of id that the driver
	// should have removed; empty means clean.
	Leftovers func(id string) []string
}

var seq atomic.Int64

func newID(t *testing.T) string {
	return fmt.Sprintf("sbtest%d%d", time.Now().UnixNano()%100000, seq.Add(1))
}

// helpers returns what the suites start a sandbox and run a shell command in it with.
func helpers(h Harness) (run func(*testing.T, string), exec func(*testing.T, string, string) string) {
	ctx := context.Background()
	d := h.Driver
	run = func(t *testing.T, id string) {
		t.Helper()
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		if err := d.Start(ctx, h.Spec(id)); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	exec = func(t *testing.T, id, shell string) string {
		t.Helper()
		var out bytes.Buffer
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
		res, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: shell}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec %q: %v", shell, err)
		}
		if res.State != agentproto.StateSucceeded {
			t.Fatalf("exec %q: state %s exit %d: %s", shell, res.State, res.ExitCode, out.String())
		}
		return out.String()
	}
	return run, exec
}

// RunHostile runs the hostile suite: sandbox code must not turn the driver against
// another sandbox or learn where the sandbox lives on the host.
func RunHostile(t *testing.T, h Harness) {
	run, exec := helpers(h)
	hostile(t, h, run, exec)
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	d := h.Driver
	run, exec := helpers(h)

	t.Run("StartStatusStatsDelete", func(t *testing.T) {
		id := newID(t)
		run(t, id)
		if st, err := d.Status(ctx, id); err != nil || st != runtime.StatusRunning {
			t.Fatalf("Status after Start = %q, %v; want running", st, err)
		}
		if err := (&agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}).Ping(ctx); err != nil {
			t.Fatalf("agent ping: %v", err)
		}
		stats, err := d.Stats(ctx, id)
		if err != nil || stats.MemoryBytes <= 0 || stats.PIDs < 1 {
			t.Fatalf("Stats = %+v, %v; want memory > 0 and pids >= 1", stats, err)
		}
		ur, usage := d.(runtime.UsageReader)
		if usage {
			// Usage reads what Stats does, but the limit counters.
			u, err := ur.Usage(ctx, id)
			if err != nil || u.MemoryBytes <= 0 || u.PIDs < 1 || u.MemoryLimit != stats.MemoryLimit || u.PIDsLimit != stats.PIDsLimit || u.DiskLimit != stats.DiskLimit {
				t.Fatalf("Usage = %+v, %v; want memory > 0, pids >= 1 and Stats' limits (%+v)", u, err, stats)
			}
		}
		ids, err := d.List(ctx)
		if err != nil || !slices.Contains(ids, id) {
			t.Fatalf("List = %v, %v; want it to contain %s", ids, err, id)
		}
		if err := d.Delete(ctx, id); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if usage {
			if u, err := ur.Usage(ctx, id); err == nil {
				t.Fatalf("Usage after Delete = %+v; want an error", u)
			}
		}
		if st, _ := d.Status(ctx, id); st != runtime.StatusAbsent {
			t.Fatalf("Status after Delete = %q; want absent", st)
		}
		ids, _ = d.List(ctx)
		if slices.Contains(ids, id) {
			t.Fatalf("List after Delete still has %s", id)
		}
		if left := h.Leftovers(id); len(left) > 0 {
			t.Fatalf("left after Delete: %v", left)
		}
	})

	t.Run("StopKeepsUpperLayer", func(t *testing.T) {
		id := newID(t)
		run(t, id)
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
		for path, body := range map[string]string{"/root/file": "kept", "/tmp/file": "gone"} {
			if _, err := cl.Upload(ctx, path, 0o644, -1, -1, strings.NewReader(body)); err != nil {
				t.Fatalf("upload %s: %v", path, err)
			}
		}
		if err := d.Stop(ctx, id); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if st, _ := d.Status(ctx, id); st != runtime.StatusAbsent {
			t.Fatalf("Status after Stop = %q; want absent", st)
		}
		if err := d.Start(ctx, h.Spec(id)); err != nil {
			t.Fatalf("Start again: %v", err)
		}
		var got bytes.Buffer
		if _, err := cl.Download(ctx, "/root/file", &got); err != nil || got.String() != "kept" {
			t.Fatalf("/root/file after restart: %q, %v; want the write kept", got.String(), err)
		}
		if fi, err := cl.Stat(ctx, "/tmp/file"); err == nil {
			t.Fatalf("/tmp/file after restart: %+v; want it gone", fi)
		}
	})

	if stg, ok := d.(runtime.Storage); ok {
		t.Run("StorageReadsAndReplacesTheLayer", func(t *testing.T) {
			id := newID(t)
			run(t, id)
			cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
			if _, err := cl.Upload(ctx, "/root/old", 0o644, -1, -1, strings.NewReader("old")); err != nil {
				t.Fatal(err)
			}
			if err := d.Stop(ctx, id); err != nil {
				t.Fatal(err)
			}
			err := stg.ReadLayer(ctx, id, 0, func(upper string) error {
				b, err := os.ReadFile(filepath.Join(upper, "root", "old"))
				if err == nil && string(b) != "old" {
					err = fmt.Errorf("read %q", b)
				}
				return err
			})
			if err != nil {
				t.Fatalf("ReadLayer: %v; want the file written in the sandbox", err)
			}
			failed := errors.New("fill failed")
			if err := stg.ReplaceLayer(ctx, id, 0, func(upper string) error {
				os.MkdirAll(filepath.Join(upper, "root"), 0o755)
				os.WriteFile(filepath.Join(upper, "root", "half"), nil, 0o644)
				return failed
			}); !errors.Is(err, failed) {
				t.Fatalf("ReplaceLayer with a failing fill: %v", err)
			}
			if err := stg.ReplaceLayer(ctx, id, 0, func(upper string) error {
				if err := os.MkdirAll(filepath.Join(upper, "root"), 0o755); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(upper, "root", "new"), []byte("new"), 0o644)
			}); err != nil {
				t.Fatalf("ReplaceLayer: %v", err)
			}
			if err := d.Start(ctx, h.Spec(id)); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if _, err := cl.Download(ctx, "/root/new", &got); err != nil || got.String() != "new" {
				t.Errorf("/root/new after the replace: %q, %v", got.String(), err)
			}
			for _, gone := range []string{"/root/old", "/root/half"} {
				if _, err := cl.Stat(ctx, gone); err == nil {
					t.Errorf("%s is still there after the replace", gone)
				}
			}
		})
	}

	t.Run("FailedStartLeavesNothing", func(t *testing.T) {
		id := newID(t)
		spec := h.Spec(id)
		spec.Image = "sha256:" + strings.Repeat("0", 64) // no such image on the node
		if err := d.Start(ctx, spec); err == nil {
			d.Delete(ctx, id)
			t.Fatal("Start of an image the node lacks succeeded")
		}
		if st, _ := d.Status(ctx, id); st != runtime.StatusAbsent {
			t.Fatalf("Status after a failed Start = %q; want absent", st)
		}
		d.Delete(ctx, id)
		if left := h.Leftovers(id); len(left) > 0 {
			t.Fatalf("left after a failed Start: %v", left)
		}
	})

	t.Run("NetworkHookJoinsBeforeStart", func(t *testing.T) {
		id := newID(t)
		spec := h.Spec(id)
		calls := 0
		spec.Network = func() (runtime.NetworkJoin, error) {
			calls++
			return runtime.NetworkJoin{Env: []string{"JOINED=yes"}}, nil
		}
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		if err := d.Start(ctx, spec); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if got := exec(t, id, "echo $JOINED"); got != "yes\n" || calls != 1 {
			t.Fatalf("the hook's environment: got %q after %d calls; want yes after 1", got, calls)
		}
	})

	t.Run("NetworkHookErrorFailsStart", func(t *testing.T) {
		id := newID(t)
		spec := h.Spec(id)
		spec.Network = func() (runtime.NetworkJoin, error) {
			return runtime.NetworkJoin{}, fmt.Errorf("no network today")
		}
		if err := d.Start(ctx, spec); err == nil {
			d.Delete(ctx, id)
			t.Fatal("Start succeeded although its network hook failed")
		}
		if st, _ := d.Status(ctx, id); st != runtime.StatusAbsent {
			t.Fatalf("Status after a failed hook = %q; want absent", st)
		}
		d.Delete(ctx, id)
		if left := h.Leftovers(id); len(left) > 0 {
			t.Fatalf("left after a failed hook: %v", left)
		}
	})

	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		id := newID(t)
		if err := d.Delete(ctx, id); err != nil {
			t.Fatalf("Delete of an unknown id: %v", err)
		}
	})

	if k, ok := d.(runtime.Killer); ok {
		for _, frozen := range []bool{false, true} {
			fz, canFreeze := d.(runtime.Freezer)
			if frozen && !canFreeze {
				continue
			}
			t.Run(fmt.Sprintf("KillEndsTheProcessesAndDeleteTheRest/frozen=%v", frozen), func(t *testing.T) {
				id := newID(t)
				run(t, id)
				exec(t, id, "sleep 1000 </dev/null >/dev/null 2>&1 &")
				if frozen { // a frozen container dies too
					if err := fz.Freeze(ctx, id); err != nil {
						t.Fatalf("Freeze: %v", err)
					}
				}
				if err := k.Kill(ctx, id); err != nil {
					t.Fatalf("Kill: %v", err)
				}
				if frozen {
					fz.Thaw(ctx, id) // whatever Kill left frozen would run again now
				}
				// An engine's record may go on saying running or paused while the dead
				// are not reaped yet (runsc's does), and the pids controller counts them
				// until then: what counts is that the agent, PID 1, does not answer.
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if err := (&agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}).Ping(pctx); err == nil {
					t.Fatalf("the agent answers after Kill")
				}
				if err := k.Kill(ctx, id); err != nil {
					t.Fatalf("Kill again: %v", err)
				}
				if err := d.Delete(ctx, id); err != nil {
					t.Fatalf("Delete after Kill: %v", err)
				}
				if ids, _ := d.List(ctx); slices.Contains(ids, id) {
					t.Fatalf("List after Kill and Delete still has %s", id)
				}
				if left := h.Leftovers(id); len(left) > 0 {
					t.Fatalf("left after Kill and Delete: %v", left)
				}
				if err := k.Kill(ctx, newID(t)); err != nil {
					t.Fatalf("Kill of an unknown id: %v", err)
				}
			})
		}
	}

	if fz, ok := d.(runtime.Freezer); ok {
		t.Run("FreezeThaw", func(t *testing.T) {
			id := newID(t)
			run(t, id)
			if err := fz.Freeze(ctx, id); err != nil {
				t.Fatalf("Freeze: %v", err)
			}
			if st, _ := d.Status(ctx, id); st != runtime.StatusPaused {
				t.Fatalf("Status when frozen = %q; want paused", st)
			}
			if err := fz.Thaw(ctx, id); err != nil {
				t.Fatalf("Thaw: %v", err)
			}
			if got := exec(t, id, "echo alive"); got != "alive\n" {
				t.Fatalf("after thaw got %q", got)
			}
		})
	}
}
