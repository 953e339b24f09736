package image

import (
	"context"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
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
