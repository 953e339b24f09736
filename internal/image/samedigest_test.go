package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImportMatchesPull: the same image, pulled from a registry or imported from an
// OCI layout (the air-gapped way), gets the same digest and the same layers.
func TestImportMatchesPull(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	defer reg.srv.Close()
	img := testImage(t, v1.Config{Env: []string{"A=1"}, WorkingDir: "/srv"}, baseLayer(t), topLayer(t))
	ref := reg.pushImage(t, "team/app:1", img)
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}

	s := newStore(t)
	pulled, err := s.Pull(context.Background(), alice, PullRequest{Ref: ref, Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t)
	imported, err := other.Import(context.Background(), alice, ImportRequest{Archive: dir, Name: "app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if imported.Digest != pulled.Digest || len(imported.Layers) != 2 || imported.Layers[1] != pulled.Layers[1] ||
		imported.Config.WorkingDir != "/srv" {
		t.Errorf("imported %s %v %+v, pulled %s %v: want the same digest, layers and config",
			imported.Digest, imported.Layers, imported.Config, pulled.Digest, pulled.Layers)
	}
}

// TestPullZstdLayer: a layer compressed with zstd (as newer builders make them)
// unpacks like a gzip one.
func TestPullZstdLayer(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	defer reg.srv.Close()
	tarBytes := mkTar(t, fileEnt("etc/zstd-says", "hello\n", 0o644))
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarBytes)), nil },
		tarball.WithCompression("zstd"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref := reg.pushImage(t, "team/zstd:1", img)
	s := newStore(t)
	got, err := s.Pull(context.Background(), alice, PullRequest{Ref: ref, Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.LayerDirs(got)[0], "etc/zstd-says"))
	if err != nil || string(b) != "hello\n" {
		t.Errorf("the zstd layer's file: %q, %v", b, err)
	}
}

// TestSetuidPolicy: setuid and setgid bits are kept, stripped or refused as the store's
// limits say.
func TestSetuidPolicy(t *testing.T) {
	requireRoot(t)
	archive := mkTar(t, fileEnt("bin/su", "x", 0o4755), fileEnt("bin/wall", "y", 0o2755), fileEnt("bin/ls", "z", 0o755))
	for _, c := range []struct {
		policy    string
		wantErr   bool
		wantModes [3]os.FileMode // bin/su, bin/wall, bin/ls
	}{
		{"", false, [3]os.FileMode{0o755 | os.ModeSetuid, 0o755 | os.ModeSetgid, 0o755}},
		{SetuidStrip, false, [3]os.FileMode{0o755, 0o755, 0o755}},
		{SetuidRefuse, true, [3]os.FileMode{}},
	} {
		s := newStore(t)
		lim := s.Limits()
		lim.Setuid = c.policy
		s.SetLimits(lim)
		img, err := importAs(t, s, alice, "setuid", false, archive)
		if c.wantErr {
			if err == nil || !strings.Contains(err.Error(), "setuid") {
				t.Errorf("policy %q: import = %v, want refused naming setuid", c.policy, err)
			}
			assertNoImage(t, s, alice, "setuid")
			continue
		}
		if err != nil {
			t.Fatalf("policy %q: %v", c.policy, err)
		}
		for i, name := range []string{"bin/su", "bin/wall", "bin/ls"} {
			fi, err := os.Lstat(filepath.Join(s.LayerDirs(img)[0], name))
			if err != nil || fi.Mode() != c.wantModes[i] {
				t.Errorf("policy %q: %s mode %v, %v; want %v", c.policy, name, fi.Mode(), err, c.wantModes[i])
			}
		}
	}
}

// TestDevicePolicy: device nodes in a layer are skipped, or refused when the store's
// limits say so; a whiteout (a 0:0 character device) is never taken for one.
func TestDevicePolicy(t *testing.T) {
	requireRoot(t)
	dev := ent{Header: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}}
	archive := mkTar(t, fileEnt("etc/ok", "x", 0o644), dev)
	skip := newStore(t)
	img, err := importAs(t, skip, alice, "dev", false, archive)
	if err != nil {
		t.Fatalf("skip: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(skip.LayerDirs(img)[0], "dev/null")); !os.IsNotExist(err) {
		t.Errorf("skip: the device node was made (%v)", err)
	}
	refuse := newStore(t)
	lim := refuse.Limits()
	lim.Devices = DevicesRefuse
	refuse.SetLimits(lim)
	if _, err := importAs(t, refuse, alice, "dev", false, archive); err == nil || !strings.Contains(err.Error(), "device node") {
		t.Errorf("refuse: import = %v, want refused naming the device node", err)
	}
	assertNoImage(t, refuse, alice, "dev")
}
