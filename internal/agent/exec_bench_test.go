package agent

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// BenchmarkExec is one exec of /bin/true through the agent (in process, over its unix
// socket, as the daemon's client reaches it) beside the same spawn done directly with
// os/exec: the difference is what the agent adds to the fork and exec every command pays.
//
//	go test -run '^$' -bench Exec -benchtime 2000x ./internal/agent/
func BenchmarkExec(b *testing.B) {
	if _, err := exec.LookPath("/bin/true"); err != nil {
		b.Skip("no /bin/true")
	}
	b.Run("agent", func(b *testing.B) {
		c, _ := startAgent(b, Options{})
		benchExec(b, c)
	})
	// As the daemon calls a sandbox's agent: over a kept connection.
	b.Run("agent-kept", func(b *testing.B) {
		sock, _ := serveAgent(b, Options{})
		c, pool, _ := pooled(sock)
		defer pool.Close()
		benchExec(b, c)
	})
	b.Run("os-exec", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchExec(b *testing.B, c *Client) {
	ctx := context.Background()
	spec := agentproto.ExecSpec{Argv: []string{"/bin/true"}}
	for b.Loop() {
		res, err := c.Exec(ctx, spec, nil, io.Discard, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		if res.State != agentproto.StateSucceeded {
			b.Fatalf("exec /bin/true: state %s, want %s", res.State, agentproto.StateSucceeded)
		}
	}
}

// BenchmarkExecPaths alternates, exec by exec, the ways the daemon can reach the agent
// (a connection dialled per exec, or kept), so that each p50 is measured under the same
// load as the other.
//
//	go test -run '^$' -bench ExecPaths -benchtime 2000x ./internal/agent/
func BenchmarkExecPaths(b *testing.B) {
	sock, _ := serveAgent(b, Options{})
	kept, pool, _ := pooled(sock)
	defer pool.Close()
	type path struct {
		name string
		c    *Client
		took []time.Duration
	}
	paths := []*path{{name: "dial", c: SocketClient(sock)}, {name: "kept", c: kept}}
	ctx := context.Background()
	spec := agentproto.ExecSpec{Argv: []string{"/bin/true"}}
	for b.Loop() {
		for _, p := range paths {
			t0 := time.Now()
			res, err := p.c.Exec(ctx, spec, nil, io.Discard, io.Discard)
			p.took = append(p.took, time.Since(t0))
			if err != nil || res.State != agentproto.StateSucceeded {
				b.Fatalf("%s: %+v, %v", p.name, res, err)
			}
		}
	}
	for _, p := range paths {
		slices.Sort(p.took)
		b.ReportMetric(float64(p.took[len(p.took)/2].Microseconds()), p.name+"-p50-µs")
	}
}
