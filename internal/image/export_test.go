package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestExportRoundTrips: an image pulled from a registry, or imported from an OCI
// layout, a `docker save` archive or a plain rootfs tarball, exports to an archive that
// imports again with the same digest and layers, into a store that never saw it.
func TestExportRoundTrips(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	defer reg.srv.Close()
	ref := reg.pushImage(t, "team/app:1", testImage(t, v1.Config{Env: []string{"A=1"}, WorkingDir: "/srv"}, baseLayer(t), topLayer(t)))
	ctx := context.Background()
	s := newStore(t)
	// Without keep_pulled_blobs a pulled image cannot be exported, and says how it can.
	if _, err := s.Pull(ctx, alice, PullRequest{Ref: ref, Name: "pulled", Insecure: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Export(alice, "pulled", &bytes.Buffer{}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "keep_pulled_blobs") {
		t.Fatalf("export of an image pulled without its blobs = %v, want failed precondition naming keep_pulled_blobs", err)
	}
	lim := s.Limits()
	lim.KeepPulledBlobs = true
	s.SetLimits(lim)
	// Pulled again, the layers already unpacked are fetched once more for their blobs.
	if img, err := s.Pull(ctx, alice, PullRequest{Ref: ref, Name: "pulled", Insecure: true}, nil); err != nil || len(img.Blobs) != 2 {
		t.Fatalf("pull with keep_pulled_blobs: %+v, %v; want the image with its two blobs", img, err)
	}
	dir := t.TempDir()
	layoutFiles, _ := ociLayout(t, baseLayer(t), topLayer(t))
	sources := map[string][]byte{
		"oci":    tarTree(t, layoutFiles),
		"docker": dockerSave(t, "saved:1", configJSON(t, baseLayer(t), topLayer(t)), baseLayer(t), topLayer(t)),
		"rootfs": gz(t, baseLayer(t)),
	}
	for name, b := range sources {
		if _, err := s.Import(ctx, alice, ImportRequest{Archive: writeFile(t, dir, name+".tar", b), Name: name}, nil); err != nil {
			t.Fatalf("import %s: %v", name, err)
		}
	}
	for _, name := range []string{"pulled", "oci", "docker", "rootfs"} {
		t.Run(name, func(t *testing.T) {
			want, err := s.Get(alice, name)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := s.Export(alice, name, &buf); err != nil {
				t.Fatalf("Export: %v", err)
			}
			var again bytes.Buffer
			if err := s.Export(alice, name, &again); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Errorf("a second export differs from the first (err %v): exports are not reproducible", err)
			}
			other := newStore(t)
			got, err := other.Import(ctx, bob, ImportRequest{Archive: writeFile(t, t.TempDir(), "x.tar", buf.Bytes()), Name: "back"}, nil)
			if err != nil {
				t.Fatalf("importing the export: %v", err)
			}
			if got.Digest != want.Digest || !slices.Equal(got.Layers, want.Layers) || got.Config.WorkingDir != want.Config.WorkingDir {
				t.Errorf("re-imported %s %v %+v; exported %s %v %+v: want the same digest, layers and config",
					got.Digest, got.Layers, got.Config, want.Digest, want.Layers, want.Config)
			}
			if name == "pulled" {
				// Other tools read it too: go-containerregistry's `docker save` reader.
				p := writeFile(t, t.TempDir(), "x.tar", buf.Bytes())
				img, err := tarball.ImageFromPath(p, nil)
				if err != nil {
					t.Fatalf("the export is not a docker-loadable archive: %v", err)
				}
				if ls, err := img.Layers(); err != nil || len(ls) != 2 {
					t.Errorf("docker reader sees %d layers (%v), want 2", len(ls), err)
				}
			}
		})
	}

	t.Run("refusals", func(t *testing.T) {
		if err := s.Export(bob, "pulled", &bytes.Buffer{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another owner's export = %v, want not found", err)
		}
		img, _ := s.Get(alice, "oci")
		blob := s.blobDataPath(img.Blobs[0])
		orig, _ := os.ReadFile(blob)
		os.WriteFile(blob, append(orig[:len(orig)-1:len(orig)-1], orig[len(orig)-1]^1), 0o600)
		defer os.WriteFile(blob, orig, 0o600)
		if err := s.Export(alice, "oci", &bytes.Buffer{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("export of a blob changed on disk = %v, want failed precondition", err)
		}
	})

	t.Run("collected with the image", func(t *testing.T) {
		for _, name := range []string{"pulled", "oci", "docker", "rootfs"} {
			if err := s.Remove(alice, name, nil); err != nil {
				t.Fatal(err)
			}
		}
		collect(t, s)
		for _, e := range entries(t, filepath.Join(s.dir, "blobs")) {
			if validDigest("sha256:" + e) {
				t.Errorf("blob %s kept after every image that named it was removed", e)
			}
		}
	})
}
