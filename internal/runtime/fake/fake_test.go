package fake_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/runtime/fake"
)

// TestConformance proves the fake by the contract every driver keeps.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	images, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	host, err := images.Get(image.Scope{}, image.HostName)
	if err != nil {
		t.Fatal(err)
	}
	d, err := fake.New(filepath.Join(dir, "sb"), images)
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, drivertest.Harness{
		Driver: d,
		Spec: func(id string) runtime.Spec {
			return runtime.Spec{ID: id, Image: host.Digest, Env: []string{"PATH=/usr/bin:/bin"}}
		},
		Leftovers: func(id string) []string {
			if _, err := os.Stat(filepath.Join(dir, "sb", id)); err == nil {
				return []string{filepath.Join(dir, "sb", id)}
			}
			return nil
		},
	})
}
