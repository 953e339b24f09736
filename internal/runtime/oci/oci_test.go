package oci_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

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
}
