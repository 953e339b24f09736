package oci_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"

	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/testenv"
)

func TestConformance(t *testing.T) {
	h, d, dir := testenv.DriverHarness(t, nil)
	drivertest.Run(t, h)
	drivertest.RunHostile(t, h)
	t.Run("ImpostorOnAgentSocketIsRefused", func(t *testing.T) {
		ctx := context.Background()
		id := "sbimpostor" + filepath.Base(dir)[len("al-oci-"):]
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		spec := h.Spec(id)
		if err := d.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "sb", id, "ctl", "agent.sock")
		if err := os.Rename(sock, sock+".real"); err != nil {
			t.Fatal(err)
		}
		// A listener of another process (this test, uid 0) where the agent's was.
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		if c, err := d.DialAgent(ctx, id); err == nil {
			c.Close()
			t.Fatal("DialAgent accepted a peer that is not the sandbox's agent")
		}
		ln.Close()
		os.Remove(sock)
		// A link to the real socket: not followed.
		if err := os.Symlink(sock+".real", sock); err != nil {
			t.Fatal(err)
		}
		if c, err := d.DialAgent(ctx, id); err == nil {
			c.Close()
			t.Fatal("DialAgent followed a symbolic link")
		}
		os.Remove(sock)
		os.Rename(sock+".real", sock)
		c, err := d.DialAgent(ctx, id)
		if err != nil {
			t.Fatalf("DialAgent to the sandbox's own agent: %v", err)
		}
		c.Close()
	})
	t.Run("StartedSandboxKeepsOnlyItsDiskMountedOnHost", func(t *testing.T) {
		// Every mount left on the host slows each later start: runc reads and copies
		// the host's mount table. A running sandbox keeps its disk mounted there (for
		// its size and snapshots) and nothing else; a restart mounts its root anew.
		ctx := context.Background()
		id := "sbmounts" + filepath.Base(dir)[len("al-oci-"):]
		sbDir := filepath.Join(dir, "sb", id)
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		spec := h.Spec(id)
		spec.Limits.Disk = 256 << 20
		shell := func(cmd string) string {
			var out bytes.Buffer
			cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
			res, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: cmd}, nil, &out, &out)
			if err != nil || res.State != agentproto.StateSucceeded {
				t.Fatalf("exec %q: %v %+v: %s", cmd, err, res, out.String())
			}
			return out.String()
		}
		for round := range 2 {
			if err := d.Start(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if got, want := testenv.MountsUnder(sbDir), []string{filepath.Join(sbDir, "fs")}; !slices.Equal(got, want) {
				t.Fatalf("round %d: host mounts under the sandbox %v, want only %v", round, got, want)
			}
			if round == 0 {
				shell("echo kept >/root/note")
			} else if got := shell("cat /root/note"); got != "kept\n" {
				t.Fatalf("after a restart the root reads %q, want the note written before", got)
			}
			if err := d.Stop(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
			if left := testenv.MountsUnder(sbDir); len(left) != 0 {
				t.Fatalf("round %d: mounts left after stop: %v", round, left)
			}
		}
	})
}
