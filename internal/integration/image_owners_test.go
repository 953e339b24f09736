package integration

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/testenv"
)

// rootfs is a plain rootfs tarball whose /who says whose image it is.
func rootfs(who string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "root/", "tmp/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "who", Mode: 0o644, Size: int64(len(who))})
	tw.Write([]byte(who))
	tw.Close()
	return buf.Bytes()
}

func importImage(t *testing.T, c *client.Client, name string, b []byte) (*api.Image, error) {
	t.Helper()
	return c.ImportImage(background, name, bytes.NewReader(b), int64(len(b)), nil)
}

func listedImages(t *testing.T, c *client.Client) []string {
	t.Helper()
	imgs, err := c.Images(background)
	if err != nil {
		t.Fatalf("list images: %v", err)
	}
	var out []string
	for _, img := range imgs {
		out = append(out, img.Name+"/"+img.Visibility+"/"+img.Owner+"/"+img.Digest)
	}
	return out
}

// TestImageOwners: over the API, owner bob can neither see, use in a create, replace
// nor remove owner alice's private image; public images are the administrator's to
// publish and remove, and every owner's to use. Uploads past the node's limit are
// refused with 413 and leave nothing behind.
func TestImageOwners(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"alice", "bob"}})
	alice, bob, admin := n.As(t, "alice"), n.As(t, "bob"), n.Client

	a, err := importImage(t, alice, "app", rootfs("alice"))
	if err != nil {
		t.Fatalf("alice imports app: %v", err)
	}
	if a.Owner != "alice" || a.Visibility != api.VisibilityPrivate {
		t.Errorf("alice's image = owner %q visibility %q, want alice, private", a.Owner, a.Visibility)
	}

	t.Run("bob cannot see it", func(t *testing.T) {
		for _, l := range listedImages(t, bob) {
			if strings.Contains(l, a.Digest) || strings.HasPrefix(l, "app/") {
				t.Errorf("bob's image list holds %s", l)
			}
		}
		for _, l := range listedImages(t, admin) {
			if strings.Contains(l, a.Digest) {
				t.Errorf("the unix socket's image list holds alice's private image: %s", l)
			}
		}
	})
	t.Run("bob cannot create from it", func(t *testing.T) {
		for _, ref := range []string{"app", a.Digest, strings.TrimPrefix(a.Digest, "sha256:")[:12]} {
			_, err := bob.Create(background, api.CreateSandboxRequest{Name: "bob-steals", Image: ref, Pull: "never"})
			wantAPIError(t, "bob creates from alice's image "+ref, err, 404, "not_found")
		}
		if list, err := bob.List(background, client.ListOptions{}); err != nil || len(list) != 0 {
			t.Errorf("bob's sandboxes = %d (%v), want none", len(list), err)
		}
	})
	t.Run("bob cannot remove it", func(t *testing.T) {
		for _, ref := range []string{"app", a.Digest} {
			wantAPIError(t, "bob removes alice's image "+ref, bob.RemoveImage(background, ref), 404, "not_found")
		}
	})
	t.Run("bob cannot replace it", func(t *testing.T) {
		b, err := importImage(t, bob, "app", rootfs("bob"))
		if err != nil {
			t.Fatalf("bob imports his own app: %v", err)
		}
		if b.Digest == a.Digest || b.Owner != "bob" {
			t.Fatalf("bob's app = %+v, want his own image", b)
		}
		found := false
		for _, l := range listedImages(t, alice) {
			found = found || l == "app/private/alice/"+a.Digest
		}
		if !found {
			t.Errorf("alice's list after bob's import = %v, want her app %s", listedImages(t, alice), a.Digest)
		}
	})
	t.Run("alice's sandbox runs alice's image", func(t *testing.T) {
		resp, err := alice.Create(background, api.CreateSandboxRequest{Name: "alice-own", Image: "app"})
		if err != nil {
			t.Fatalf("alice creates from app: %v", err)
		}
		if resp.Sandbox.ImageDigest != a.Digest {
			t.Errorf("alice's sandbox image = %s, want %s", resp.Sandbox.ImageDigest, a.Digest)
		}
		var out bytes.Buffer
		if _, err := alice.Download(background, "alice-own", "/who", &out); err != nil || out.String() != "alice" {
			t.Errorf("/who in alice's sandbox = %q (%v), want alice", out.String(), err)
		}
		// Bob removing his app does not touch alice's, which her sandbox uses.
		if err := bob.RemoveImage(background, "app"); err != nil {
			t.Errorf("bob removes his own app: %v", err)
		}
		wantAPIError(t, "alice removes her image in use", alice.RemoveImage(background, "app"), 409, "failed_precondition")
		if _, err := alice.Terminate(background, "alice-own"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("public images", func(t *testing.T) {
		b := rootfs("everyone")
		_, err := bob.ImportPublicImage(background, "shared", bytes.NewReader(b), int64(len(b)), nil)
		wantAPIError(t, "bob publishes", err, 403, "permission_denied")
		pub, err := admin.ImportPublicImage(background, "shared", bytes.NewReader(b), int64(len(b)), nil)
		if err != nil {
			t.Fatalf("the administrator publishes: %v", err)
		}
		if pub.Visibility != api.VisibilityPublic {
			t.Errorf("published image visibility = %q", pub.Visibility)
		}
		found := false
		for _, l := range listedImages(t, bob) {
			found = found || l == "shared/public/local/"+pub.Digest
		}
		if !found {
			t.Errorf("bob's list %v lacks the public image", listedImages(t, bob))
		}
		wantAPIError(t, "bob removes the public image", bob.RemoveImage(background, "shared"), 403, "permission_denied")
		if err := admin.RemoveImage(background, "shared"); err != nil {
			t.Errorf("the administrator removes the public image: %v", err)
		}
	})
	t.Run("upload limit", func(t *testing.T) {
		n.Images.SetLimits(image.Limits{Upload: 1 << 20})
		defer n.Images.SetLimits(image.Limits{})
		big := make([]byte, 2<<20)
		rand.Read(big)
		_, err := bob.ImportImage(background, "big", bytes.NewReader(big), int64(len(big)), nil)
		wantAPIError(t, "bob uploads 2 MiB (known length)", err, 413, "invalid_argument")
		// A body of unknown length is cut at the limit.
		_, err = bob.ImportImage(background, "big", struct{ *bytes.Reader }{bytes.NewReader(big)}, -1, nil)
		wantAPIError(t, "bob uploads 2 MiB (chunked)", err, 413, "invalid_argument")
		if ents, _ := os.ReadDir(filepath.Join(n.Dir, "uploads")); len(ents) != 0 {
			t.Errorf("uploads left: %d", len(ents))
		}
	})
}
