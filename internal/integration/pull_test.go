package integration

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// greeterSource is the program the pulled images run: it says who and where it is.
const greeterSource = `package main

import (
	"fmt"
	"os"
)

func main() {
	wd, _ := os.Getwd()
	motd, _ := os.ReadFile("/etc/motd")
	fmt.Printf("uid=%d cwd=%s greeting=%s motd=%s", os.Getuid(), wd, os.Getenv("GREETING"), motd)
}
`

// tarLayer makes an uncompressed layer of files (name -> body; a name ending in / is
// a directory).
func tarLayer(t *testing.T, files map[string]string, order ...string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range order {
		body := files[name]
		if strings.HasSuffix(name, "/") {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755})
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	tw.Close()
	return layerOfTar(t, buf.Bytes())
}

// layerOfTar is the layer whose uncompressed tar stream is b.
func layerOfTar(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCreatePullsFromRegistry: a create through the Go SDK of an image that is not
// here yet has the daemon pull it, and the sandbox runs on it.
func TestCreatePullsFromRegistry(t *testing.T) {
	reg := testenv.NewRegistry(t)
	n := testenv.NewNode(t, testenv.Options{Config: func(c *manager.Config) { c.InsecureRegistries = []string{reg.Host} }})
	ref, digest := reg.PushRandom(t, "team/fresh")
	resp, err := n.Client.Create(background, api.CreateSandboxRequest{Name: "fresh", Image: ref, Network: &api.NetworkPolicy{Mode: "none"}})
	if err != nil {
		t.Fatalf("create of an image not pulled yet: %v", err)
	}
	if sb := resp.Sandbox; sb == nil || sb.State != api.StateRunning || sb.ImageDigest != digest {
		t.Errorf("created %+v, want running on %s", resp.Sandbox, digest)
	}
	if img, err := n.Client.Image(background, ref); err != nil || img.Digest != digest {
		t.Errorf("the pulled image: %+v, %v; want digest %s", img, err, digest)
	}
}

// TestPulledImage pulls an image from a registry on loopback (go-containerregistry's,
// serving images the test builds), runs a sandbox on it with the image's user, working
// directory and environment, and pins it: after the tag moves, the sandbox resumes on
// the digest it started from while a new one gets the new image.
func TestPulledImage(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(netQuietLog())))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	n := testenv.NewNode(t, testenv.Options{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(greeterSource), 0o644)
	build := exec.Command("go", "build", "-o", "greeter", "main.go")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v\n%s", err, out)
	}
	prog, _ := os.ReadFile(filepath.Join(dir, "greeter"))
	base := tarLayer(t, map[string]string{"bin/greeter": string(prog),
		"etc/passwd": "root:x:0:0::/root:/bin/greeter\napp:x:1000:1000::/work:/bin/greeter\n"},
		"bin/", "etc/", "root/", "tmp/", "work/", "bin/greeter", "etc/passwd")
	push := func(motd string) string {
		t.Helper()
		img, err := mutate.AppendLayers(empty.Image, base, tarLayer(t, map[string]string{"etc/motd": motd}, "etc/", "etc/motd"))
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		cf.OS, cf.Architecture = "linux", goruntime.GOARCH
		cf.Config.Env = []string{"PATH=/bin", "GREETING=hello"}
		cf.Config.WorkingDir, cf.Config.User = "/work", "app"
		cf.Config.Cmd = []string{"/bin/greeter"}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(host+"/team/greeter:1", name.Insecure)
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	ref := host + "/team/greeter:1"
	first := push("v1")

	var mu sync.Mutex
	statuses := map[string]int{}
	img, err := n.Client.PullImage(background, api.PullRequest{Ref: ref}, func(ev api.PullEvent) {
		mu.Lock()
		statuses[ev.Status]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if img.Digest != first || img.Name != ref || img.Layers != 2 || !strings.HasSuffix(img.Reference, "/team/greeter:1") {
		t.Errorf("pulled image %+v, want digest %s, name %s, two layers and its reference", img, first, ref)
	}
	if statuses["done"] != 2 || statuses["downloading"] == 0 {
		t.Errorf("progress statuses %v, want downloading and done for both layers", statuses)
	}

	sb := n.Create(t, api.CreateSandboxRequest{Name: "pulled", Image: ref})
	if sb.ImageDigest != first {
		t.Errorf("the sandbox pins %s, want %s", sb.ImageDigest, first)
	}
	greet := func(ref string) string {
		t.Helper()
		res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: []string{"/bin/greeter"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec in %s: %v %+v", ref, err, res)
		}
		return res.Stdout
	}
	want1 := "uid=1000 cwd=/work greeting=hello motd=v1"
	if out := greet(sb.Name); out != want1 {
		t.Errorf("in the pulled image: %q, want %q (its user, working directory and environment)", out, want1)
	}
	// An exec that names nothing runs the image's own command.
	if res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{}); err != nil || res.Stdout != want1 {
		t.Errorf("exec of the image's cmd: %+v, %v; want %q", res, err, want1)
	}

	// Policy missing: nothing is fetched for an image that is here.
	again, err := n.Client.PullImage(background, api.PullRequest{Ref: ref, Policy: api.PullMissing}, nil)
	if err != nil || again.Digest != first {
		t.Errorf("pull --pull missing: %+v, %v", again, err)
	}

	// The tag moves: the running sandbox keeps its digest across a restart; a new one
	// gets the new image.
	second := push("v2")
	if _, err := n.Client.PullImage(background, api.PullRequest{Ref: ref}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Resume(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	if out := greet(sb.Name); out != want1 {
		t.Errorf("after the tag moved, the resumed sandbox says %q, want %q", out, want1)
	}
	sb2 := n.Create(t, api.CreateSandboxRequest{Name: "pulled-2", Image: ref})
	if sb2.ImageDigest != second || !strings.HasSuffix(greet(sb2.Name), "motd=v2") {
		t.Errorf("a new sandbox pins %s, want the moved tag's %s", sb2.ImageDigest, second)
	}
	if got, err := n.Client.Get(background, sb.Name); err != nil || got.ImageDigest != first {
		t.Errorf("get: %+v, %v; want the first digest", got, err)
	}

	// Air-gapped: the image exported through the API imports on another node with
	// the same digest, and runs there.
	// A pull keeps no blobs unless the node says so; then a pull again keeps them.
	var archive bytes.Buffer
	if _, err := n.Client.ExportImage(background, ref, &archive); err == nil || !strings.Contains(err.Error(), "keep_pulled_blobs") {
		t.Fatalf("export of an image pulled without its blobs = %v, want a refusal naming images.keep_pulled_blobs", err)
	}
	lim := n.Images.Limits()
	lim.KeepPulledBlobs = true
	n.Images.SetLimits(lim)
	if _, err := n.Client.PullImage(background, api.PullRequest{Ref: ref, Policy: api.PullAlways}, nil); err != nil {
		t.Fatal(err)
	}
	archive.Reset()
	if _, err := n.Client.ExportImage(background, ref, &archive); err != nil {
		t.Fatalf("export: %v", err)
	}
	other := testenv.NewNode(t)
	moved, err := other.Client.ImportImage(background, "greeter", &archive, int64(archive.Len()), nil)
	if err != nil || moved.Digest != second {
		t.Fatalf("import of the export on another node: %+v, %v; want digest %s", moved, err, second)
	}
	other.Create(t, api.CreateSandboxRequest{Name: "moved", Image: "greeter"})
	if res, err := other.Client.Exec(background, "moved", api.ExecRequest{}); err != nil || !strings.HasSuffix(res.Stdout, "motd=v2") {
		t.Errorf("the moved image's cmd: %+v, %v", res, err)
	}
	if _, err := n.Client.ExportImage(background, "host", io.Discard); err == nil || !strings.Contains(err.Error(), "cannot be exported") {
		t.Errorf("export of the host image = %v, want a refusal that says why", err)
	}

	// A registry not on the node's list is refused plain http.
	_, err = n.Client.PullImage(background, api.PullRequest{Ref: "127.0.0.2:1/x/y:1"}, nil)
	if err == nil {
		t.Error("a plain-http pull from a registry not on the insecure list succeeded")
	}
}
