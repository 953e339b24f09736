package cli

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestImagePull pulls from a registry on loopback: one line a layer off a terminal,
// the image in the table, a create pulls an image that is not here (not with --pull
// never), and a bad --pull is refused by the daemon.
func TestImagePull(t *testing.T) {
	reg := httptest.NewServer(registry.New(quietRegistry))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/demo/app:1"
	r, _ := name.ParseReference(ref, name.Insecure)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})}

	// The daemon pulls what a create names and does not have, and the CLI shows it.
	_, errOut, err := n.run(bg, "", "create", "box", "--image", ref, "--pull", "never")
	wantExit(t, err, 1)
	wantContains(t, "create --pull never of an image not here", errOut, "(not_found)", "pull it first")
	out, errOut, err := n.run(bg, "", "create", "box", "--image", ref)
	wantExit(t, err, 0)
	wantContains(t, "create", out, "box")
	if strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, "layer 1/2") || !strings.Contains(errOut, "layer 2/2") {
		t.Errorf("create's pull progress off a terminal = %q, want one line a layer", errOut)
	}
	wantContains(t, "get shows the digest", n.must(t, "get", "box"), ref, d.String())
	out, errOut, err = n.run(bg, "", "image", "pull", ref)
	wantExit(t, err, 0)
	wantContains(t, "image pull", out, ref, shortDigest(d.String()))
	if strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, "layer 1/2") || !strings.Contains(errOut, "cached") {
		t.Errorf("progress off a terminal = %q, want one line a layer, cached", errOut)
	}

	wantContains(t, "image ls", n.must(t, "image", "ls"), ref, "box")
	wantContains(t, "image inspect", n.must(t, "image", "inspect", ref), d.String(), "/demo/app:1", "used by", "box", "layer 2")
	wantContains(t, "image prewarm", n.must(t, "image", "prewarm", ref), "is ready", d.String())
	_, errOut, err = n.run(bg, "", "image", "prune")
	wantExit(t, err, 2)
	wantContains(t, "prune without --yes", errOut, "--yes")
	wantContains(t, "prune with the image in use", n.must(t, "image", "prune", "--yes"), "0 images removed")
	n.must(t, "rm", "box")
	out = n.must(t, "image", "prune", "--yes")
	wantContains(t, "prune", out, "removed "+ref, "1 images removed")
	if strings.Contains(n.must(t, "image", "ls"), ref) {
		t.Error("the pruned image is still listed")
	}

	_, errOut, err = n.run(bg, "", "create", "box2", "--image", ref, "--pull", "sometimes")
	wantExit(t, err, 1)
	wantContains(t, "a bad --pull", errOut, "(invalid_argument)", `"sometimes"`, "missing (the default", "always or never")
	_, errOut, err = n.run(bg, "", "image", "pull", "Not A Reference")
	wantExit(t, err, 1)
	wantContains(t, "a bad reference", errOut, "(invalid_argument)")
}

// TestRegistryLogin: a pull from a registry that wants credentials fails without
// them, works once the owner logged in (the login is a secret of the owner's, never
// shown), and fails again after logout.
func TestRegistryLogin(t *testing.T) {
	inner := registry.New(quietRegistry)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != "s3cret-pw" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	img, _ := random.Image(1024, 1)
	ref := host + "/private/app:1"
	r, _ := name.ParseReference(ref, name.Insecure)
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: "ci", Password: "s3cret-pw"})); err != nil {
		t.Fatal(err)
	}
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})}

	_, errOut, err := n.run(bg, "", "image", "pull", ref)
	wantExit(t, err, 1)
	wantContains(t, "pull without a login", errOut, "(unauthenticated)")
	out, _, err := n.run(bg, "s3cret-pw\n", "registry", "login", host, "--username", "ci", "--password-stdin")
	wantExit(t, err, 0)
	wantContains(t, "registry login", out, "logged in to "+host, "registry-")
	n.must(t, "image", "pull", ref)
	if ls := n.must(t, "secret", "ls"); !strings.Contains(ls, "registry-") || strings.Contains(ls, "s3cret") {
		t.Errorf("secret ls after login = %q, want the login listed without its value", ls)
	}
	n.must(t, "registry", "logout", host)
	_, errOut, err = n.run(bg, "", "image", "pull", ref, "--name", "again")
	wantExit(t, err, 1)
	wantContains(t, "pull after logout", errOut, "(unauthenticated)")
}

// TestRegistryMirror: a pull goes to the configured mirror first and names the image
// as asked; an image the mirror lacks comes from the registry itself; a registry that
// does not answer is no obstacle while the mirror has the image.
func TestRegistryMirror(t *testing.T) {
	mirror := httptest.NewServer(registry.New(quietRegistry))
	defer mirror.Close()
	origin := httptest.NewServer(registry.New(quietRegistry))
	defer origin.Close()
	mhost, ohost := strings.TrimPrefix(mirror.URL, "http://"), strings.TrimPrefix(origin.URL, "http://")
	push := func(host, repo string) string {
		img, _ := random.Image(1024, 1)
		r, _ := name.ParseReference(host+repo, name.Insecure)
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	onMirror := push(mhost, "/team/a:1")
	onOrigin := push(ohost, "/team/b:1")
	dead := "127.0.0.1:9" // nothing answers there
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) {
		c.InsecureRegistries = []string{mhost, ohost, dead}
		c.RegistryMirrors = map[string][]string{ohost: {mhost}, dead: {mhost}}
	}})}
	wantContains(t, "pull through the mirror", n.must(t, "image", "pull", ohost+"/team/a:1"), ohost+"/team/a:1", shortDigest(onMirror))
	wantContains(t, "pull of what only the registry has", n.must(t, "image", "pull", ohost+"/team/b:1"), shortDigest(onOrigin))
	wantContains(t, "a dead registry behind a mirror", n.must(t, "image", "pull", dead+"/team/a:1"), shortDigest(onMirror))
}

// quietRegistry keeps the test registry from logging every request.
var quietRegistry = registry.Logger(log.New(io.Discard, "", 0))

// TestPullBars draws a line per layer and a total, redrawn in place.
func TestPullBars(t *testing.T) {
	var out strings.Builder
	b := &pullBars{w: &out, start: time.Now().Add(-time.Second), layers: map[int]*layerBar{}}
	b.update(api.PullEvent{Status: "downloading", Layer: 1, Layers: 2, Digest: "sha256:" + strings.Repeat("ab", 32), Done: 512 << 10, Total: 1 << 20})
	b.update(api.PullEvent{Status: "cached", Layer: 2, Layers: 2, Digest: "sha256:" + strings.Repeat("cd", 32), Total: 2 << 20})
	got := out.String()
	for _, want := range []string{"layer 1/2 sha256:abababababab downloading", "50%", "layer 2/2 sha256:cdcdcdcdcdcd cached", "ETA", "cached", "total", "\x1b[3A"} {
		if !strings.Contains(got, want) {
			t.Errorf("bars = %q, want %q in them", got, want)
		}
	}
}

// TestImagePruneCountsSharedLayersOnce prunes two images of which one holds every layer
// of the other: what is freed is the bigger one's layers, not the two sizes added up.
func TestImagePruneCountsSharedLayersOnce(t *testing.T) {
	reg := httptest.NewServer(registry.New(quietRegistry))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	base, err := random.Image(8192, 2)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := random.Layer(8192, types.OCIUncompressedLayer)
	if err != nil {
		t.Fatal(err)
	}
	more, err := mutate.AppendLayers(base, extra)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]v1.Image{host + "/demo/base:1": base, host + "/demo/more:1": more}
	for ref, img := range refs {
		r, _ := name.ParseReference(ref, name.Insecure)
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
	}
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})}
	sizes := map[string]int64{}
	for ref := range refs {
		n.must(t, "image", "pull", ref)
		var img api.Image
		if err := json.Unmarshal([]byte(n.must(t, "image", "inspect", ref, "-o", "json")), &img); err != nil {
			t.Fatal(err)
		}
		sizes[ref] = img.Size
	}
	var res api.PruneResult
	if err := json.Unmarshal([]byte(n.must(t, "image", "prune", "--yes", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	want := sizes[host+"/demo/more:1"]
	if len(res.Removed) != 2 || res.Freed != want {
		t.Errorf("prune removed %v and freed %d bytes; want both images and %d (the second one's layers, which hold the first's), not %d",
			res.Removed, res.Freed, want, want+sizes[host+"/demo/base:1"])
	}
}
