package oci_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
		// The connection dialled ahead after the start reached the real agent: wait for
		// it and drop it, so that every dial below goes to the socket's path.
		for deadline := time.Now().Add(5 * time.Second); d.IdleAgentConns(id) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		d.DropAgentConns(id)
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
	// Every container start reads and copies the host's whole mount table, so each
	// running sandbox keeps as few host mounts as it can: its disk and its root overlay.
	// The idmapped image layers are gone once the overlay holds them, and the sandbox
	// still reads its image and writes its own layer.
	t.Run("HostMountsOfARunningSandbox", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id := "sbmounts" + filepath.Base(dir)[len("al-oci-"):]
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		spec := h.Spec(id)
		spec.Limits.Disk = 64 << 20
		if err := d.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		under := filepath.Join(dir, "sb", id)
		var got []string
		for _, m := range testenv.MountsUnder(under) {
			got = append(got, strings.TrimPrefix(m, under+"/"))
		}
		slices.Sort(got)
		if want := []string{"fs", "rootfs"}; !slices.Equal(got, want) {
			t.Errorf("host mounts under the sandbox's directory: %v, want %v", got, want)
		}
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
		var out strings.Builder
		res, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: "echo x >/root/f && stat -c %u /root/f /etc/passwd"}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 || out.String() != "0\n0\n" {
			t.Errorf("image read and own layer written as root inside: %+v, %v, %q (want the owners 0 and 0)", res, err, out.String())
		}
	})
	// Kept agent connections belong to one container: after a restart every call
	// reaches the new agent, concurrent calls included, and once the container has
	// ended a call fails at once instead of waiting on a connection of the old one.
	t.Run("KeptConnectionsFollowTheContainer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id := "sbkept" + filepath.Base(dir)[len("al-oci-"):]
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		if err := d.Start(ctx, h.Spec(id)); err != nil {
			t.Fatal(err)
		}
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
		sh := func(cmd string) (*agentproto.ExitResult, error) {
			return cl.Exec(ctx, agentproto.ExecSpec{Shell: cmd}, nil, io.Discard, io.Discard)
		}
		// Four at once, so that several connections are kept.
		four := func(cmd, when string) {
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if res, err := sh(cmd); err != nil || res.ExitCode != 0 {
						t.Errorf("%s %s: %+v, %v", cmd, when, res, err)
					}
				}()
			}
			wg.Wait()
		}
		four("touch /tmp/first", "in the first container")
		if err := d.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx, h.Spec(id)); err != nil {
			t.Fatal(err)
		}
		// /tmp is the container's own: the first one's file is not in the new one.
		four("test ! -e /tmp/first", "after the restart (want it to run in the new container)")
		if err := d.Kill(ctx, id); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if res, err := sh("true"); err == nil {
			t.Errorf("exec after the container was killed: %+v, want an error", res)
		}
		if el := time.Since(t0); el > 5*time.Second {
			t.Errorf("exec after the container was killed took %v to fail", el)
		}
	})
}

// TestFirstCallFindsTheAgentDialled: once a container's agent said it was ready, the
// driver dials it in the background, and the first call takes that connection instead
// of dialling (agent.Pool.Prime).
func TestFirstCallFindsTheAgentDialled(t *testing.T) {
	h, d, dir := testenv.DriverHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := "sbprime" + filepath.Base(dir)[len("al-drv-"):]
	t.Cleanup(func() { d.Delete(context.Background(), id) })
	if err := d.Start(ctx, h.Spec(id)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); d.IdleAgentConns(id) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no connection to the new agent was dialled ahead")
		}
	}
	c, err := d.DialAgent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if kc, ok := c.(agent.KeptConn); !ok || !kc.Reused() {
		t.Fatal("the first call dialled its own connection; want the one dialled ahead")
	}
	cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("a call after the first: %v", err)
	}
}
