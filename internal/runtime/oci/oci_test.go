package oci_test

import (
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
		Driver: d,
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
}
