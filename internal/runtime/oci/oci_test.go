package oci_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/testenv"
)

func TestConformance(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp("/tmp", "al-oci-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	images, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	host, err := images.Get(image.Scope{}, image.HostName)
	if err != nil {
		t.Fatal(err)
	}
	parent := "airlock-test-" + filepath.Base(dir)
	d, err := oci.New(oci.Options{Root: filepath.Join(dir, "sb"), RuncRoot: filepath.Join(dir, "runc"),
		AgentBinary: bin, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range testenv.CgroupDirs(parent) {
			os.Remove(c)
		}
		if m := testenv.MountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
			return
		}
		os.RemoveAll(dir)
	})
	var mounts []runtime.Mount
	for _, m := range host.Mounts {
		mounts = append(mounts, runtime.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
	}
	slots := map[string]uint32{}
	drivertest.Run(t, drivertest.Harness{
		Driver:   d,
		HostDirs: []string{dir},
		Spec: func(id string) runtime.Spec {
			slot, ok := slots[id]
			if !ok {
				slot = uint32(len(slots) + 1)
				slots[id] = slot
			}
			return runtime.Spec{ID: id, Layers: images.LayerDirs(host), Mounts: mounts,
				UIDBase: 1<<30 + slot*65536, Env: host.Config.Env, WorkingDir: "/root",
				Limits: runtime.Limits{Memory: 128 << 20, PIDs: 128}}
		},
		Leftovers: func(id string) []string {
			left := testenv.MountsUnder(filepath.Join(dir, "sb", id))
			if _, err := os.Stat(filepath.Join(dir, "sb", id)); err == nil {
				left = append(left, filepath.Join(dir, "sb", id))
			}
			left = append(left, testenv.CgroupDirs(parent+"/"+id)...)
			return left
		},
	})
	t.Run("ImpostorOnAgentSocketIsRefused", func(t *testing.T) {
		ctx := context.Background()
		id := "sbimpostor" + filepath.Base(dir)[len("al-oci-"):]
		t.Cleanup(func() { d.Delete(context.Background(), id) })
		spec := runtime.Spec{ID: id, Layers: images.LayerDirs(host), Mounts: mounts,
			UIDBase: 1<<30 + 60*65536, Env: host.Config.Env, Limits: runtime.Limits{Memory: 128 << 20, PIDs: 128}}
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
