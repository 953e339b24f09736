package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockhq/airlock/internal/failpoint"
)

// TestPullFailuresSurviveAKilledDaemon: for every kind of failure a pull can meet, the
// daemon is killed (SIGKILL, by a crash point) at the moment it meets it, before any
// cleanup runs. After each restart the failed image is not listed, the store's tmp/ is
// empty, every layer and kept blob on disk is whole and accounted for (by an image or
// by a pending pull kept for a retry), and the next pull works.
func TestPullFailuresSurviveAKilledDaemon(t *testing.T) {
	good := rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "etc/good", Mode: 0o644}}, "fine")
	type kind struct {
		name string
		bad  v1.Layer // nil: the image is good; the failure is in the registry or the reference
		ref  string   // the repository and tag pulled ("" : crash/NAME:1)
	}
	var (
		mu       sync.Mutex
		tampered = map[string]string{} // blob digest -> how its GET is spoiled
	)
	kinds := []kind{
		{name: "digest-mismatch", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "etc/x", Mode: 0o644}}, strings.Repeat("x", 64<<10))},
		{name: "cut-off", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "etc/y", Mode: 0o644}}, strings.Repeat("y", 64<<10))},
		{name: "absolute-path", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "/etc/evil", Mode: 0o644}}, "x")},
		{name: "climbing-path", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "../../evil", Mode: 0o644}}, "x")},
		{name: "escaping-symlink", bad: rawTarLayer(t, []tar.Header{
			{Typeflag: tar.TypeSymlink, Name: "out", Linkname: "/etc"},
			{Typeflag: tar.TypeReg, Name: "out/evil", Mode: 0o644}}, "x")},
		{name: "device", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeChar, Name: "dev/mem", Mode: 0o600, Devmajor: 1, Devminor: 1}}, "")},
		{name: "setuid", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "bin/su", Mode: 0o4755}}, "x")},
		{name: "bomb", bad: rawTarLayer(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "zeros", Mode: 0o644}}, strings.Repeat("\x00", 64<<20))},
		{name: "no-platform"},
		{name: "unknown-tag", ref: "crash/no-such:1"},
	}
	inner := registry.New(quietRegistry())
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := strings.Index(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
			mu.Lock()
			how := tampered[r.URL.Path[i+len("/blobs/"):]]
			mu.Unlock()
			if how != "" {
				spoilBlob(w, r, inner, how)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	push := func(repo string, img v1.Image) {
		t.Helper()
		r, _ := name.ParseReference(host+"/"+repo, name.Insecure)
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kinds {
		switch {
		case k.bad != nil:
			push("crash/"+k.name+":1", imageOf(t, good, k.bad))
			d, _ := k.bad.Digest()
			switch k.name {
			case "digest-mismatch":
				tampered[d.String()] = "flip"
			case "cut-off":
				tampered[d.String()] = "cut"
			}
		case k.name == "no-platform":
			other := "arm64"
			if goruntime.GOARCH == "arm64" {
				other = "amd64"
			}
			idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: imageOf(t, good),
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}})
			r, _ := name.ParseReference(host+"/crash/"+k.name+":1", name.Insecure)
			if err := remote.WriteIndex(r, idx); err != nil {
				t.Fatal(err)
			}
		}
	}

	d := startDaemonB(t, "images: {insecure_registries: ["+host+"], setuid: refuse, devices: refuse}")
	d.env = []string{failpoint.EnvVar + "=image.layer-failed,image.install-failed,image.pull-failed"}
	d.stop(syscall.SIGTERM)
	d.start()
	store := filepath.Join(d.dir, "state", "images")
	for _, k := range kinds {
		ref := host + "/crash/" + k.name + ":1"
		if k.ref != "" {
			ref = host + "/" + k.ref
		}
		_, errOut, code := d.airlock("image", "pull", ref)
		if code == 0 {
			t.Fatalf("%s: the pull of %s succeeded", k.name, ref)
		}
		if !d.killed(30 * time.Second) {
			t.Fatalf("%s: the daemon was not killed at the failure (the pull said: %s)", k.name, errOut)
		}
		d.start()
		if out := d.must("image", "ls"); strings.Contains(out, "crash/"+k.name) {
			t.Errorf("%s: after the crash the failed image is listed:\n%s", k.name, out)
		}
		checkImageStore(t, k.name, store)
	}
	// The store still works: a good image pulls, and its layer is the one kept whole.
	push("crash/good:1", imageOf(t, good))
	d.must("image", "pull", host+"/crash/good:1")
	if out := d.must("image", "ls"); !strings.Contains(out, "crash/good") {
		t.Errorf("after the crashes a good pull is not listed:\n%s", out)
	}
	d.env = nil
}

// killed waits for the daemon to die by SIGKILL (a crash point) and reports whether it did.
func (d *daemon) killed(within time.Duration) bool {
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		d.cmd = nil
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				return true
			}
		}
		d.t.Logf("the daemon ended with %v", err)
		return false
	case <-time.After(within):
		d.cmd.Process.Kill()
		<-done
		d.cmd = nil
		return false
	}
}

// checkImageStore checks an image store a restarted daemon opened: tmp/ is empty, and
// every layer and kept blob is named by an image record or a pending pull.
func checkImageStore(t *testing.T, what, store string) {
	t.Helper()
	if tmp := dirEntries(filepath.Join(store, "tmp")); len(tmp) > 0 {
		t.Errorf("%s: after the restart, work left in the store's tmp: %v", what, tmp)
	}
	named := map[string]bool{}
	add := func(digests ...string) {
		for _, d := range digests {
			named[strings.TrimPrefix(d, "sha256:")] = true
		}
	}
	for _, dir := range []string{"images", "pending"} {
		for _, e := range dirEntries(filepath.Join(store, dir)) {
			b, err := os.ReadFile(filepath.Join(store, dir, e))
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Layers       json.RawMessage `json:"layers"`
				Blobs        []string        `json:"blobs"`
				Manifest     string          `json:"manifest"`
				ConfigDigest string          `json:"config_digest"`
			}
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Errorf("%s: %s/%s is not whole: %v", what, dir, e, err)
				continue
			}
			add(rec.Blobs...)
			add(rec.Manifest, rec.ConfigDigest)
			var ids []string
			var pend []struct {
				DiffID string `json:"diff_id"`
				Blob   string `json:"blob"`
			}
			if json.Unmarshal(rec.Layers, &ids) == nil {
				add(ids...)
			} else if json.Unmarshal(rec.Layers, &pend) == nil {
				for _, l := range pend {
					add(l.DiffID, l.Blob)
				}
			}
		}
	}
	for _, dir := range []string{"layers", "blobs"} {
		for _, e := range dirEntries(filepath.Join(store, dir)) {
			if strings.HasSuffix(e, ".json") {
				continue // a note about a blob, not the blob
			}
			if !named[e] {
				t.Errorf("%s: %s/%s is on disk but no image or pending pull names it", what, dir, e)
			}
		}
	}
}

// rawTarLayer is a layer of exactly these tar entries, every regular file holding body.
func rawTarLayer(t *testing.T, hdrs []tar.Header, body string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return layerOfTar(t, buf.Bytes())
}

// imageOf is a linux image of this machine's architecture made of layers.
func imageOf(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// spoilBlob serves a blob spoiled: "flip" changes one byte in its middle (same
// length: only the digest tells), "cut" sends half of it and drops the connection.
func spoilBlob(w http.ResponseWriter, r *http.Request, next http.Handler, how string) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if how == "flip" {
		body[len(body)/2] ^= 0xff
		w.WriteHeader(rec.Code)
		w.Write(body)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, bw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n")
	head.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	bw.Write(head.Bytes())
	bw.Write(body[:len(body)/2])
	bw.Flush()
}
