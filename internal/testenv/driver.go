package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/image"
	airlockrt "github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/sweep"
)

// DriverHarness makes an OCI driver running engine (nil: runc) in a private directory
// and cgroup parent, and the drivertest harness that runs the host image on it. Its
// cleanup fails the test if a mount is left, and removes the rest.
func DriverHarness(t *testing.T, engine *oci.Engine) (drivertest.Harness, *oci.Driver, string) {
	RequireHost(t)
	bin := AgentBinary(t)
	dir := TempDir(t, "al-drv-")
	parent := "airlock-test-" + filepath.Base(dir)
	if err := sweep.WriteRecord(dir, sweep.Record{CgroupParents: []string{parent},
		Runtimes: []sweep.Runtime{{Binary: engineBinary(engine), Root: filepath.Join(dir, "runc")}}}); err != nil {
		t.Fatal(err)
	}
	images, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	host, err := images.Get(image.Scope{}, image.HostName)
	if err != nil {
		t.Fatal(err)
	}
	d, err := oci.New(oci.Options{Root: filepath.Join(dir, "sb"), RuncRoot: filepath.Join(dir, "runc"),
		AgentBinary: bin, CgroupParent: parent, Engine: engine, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		for _, c := range CgroupDirs(parent) {
			os.Remove(c)
		}
		if m := MountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
			return
		}
		os.RemoveAll(dir)
	})
	slots := map[string]uint32{}
	h := drivertest.Harness{
		Driver:   d,
		HostDirs: []string{dir},
		Spec: func(id string) airlockrt.Spec {
			slot, ok := slots[id]
			if !ok {
				slot = uint32(len(slots) + 1)
				slots[id] = slot
			}
			return airlockrt.Spec{ID: id, Image: host.Digest,
				UIDBase: 1<<30 + slot*65536, Env: host.Config.Env, WorkingDir: "/root",
				Limits: airlockrt.Limits{Memory: 128 << 20, PIDs: 128}}
		},
		Leftovers: func(id string) []string {
			left := MountsUnder(filepath.Join(dir, "sb", id))
			if _, err := os.Stat(filepath.Join(dir, "sb", id)); err == nil {
				left = append(left, filepath.Join(dir, "sb", id))
			}
			left = append(left, CgroupDirs(parent+"/"+id)...)
			return left
		},
	}
	return h, d, dir
}

// engineBinary is the binary of engine (nil: runc).
func engineBinary(engine *oci.Engine) string {
	if engine == nil || engine.Path == "" {
		return "runc"
	}
	return engine.Path
}
