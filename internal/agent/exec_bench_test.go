package agent

import (
	"context"
	"io"
	"os/exec"
	"syscall"
	"testing"

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
