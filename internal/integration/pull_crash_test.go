package integration

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPullSurvivesAKilledDaemon kills the daemon in the middle of a pull (one layer
// unpacked, the other still downloading): after the restart no image and no partly
// unpacked layer is visible, and the retry downloads only the layer that was missing.
func TestPullSurvivesAKilledDaemon(t *testing.T) {
	img, err := random.Image(256<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	stallDigest, _ := layers[1].Digest()
	var (
		stall   = make(chan struct{}) // closed to let the stalled blob through
		stalled = make(chan struct{}, 1)
		once    sync.Once
		gets    sync.Map // blob digest -> *atomic.Int64
	)
	inner := registry.New(quietRegistry())
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := strings.Index(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
			d := r.URL.Path[i+len("/blobs/"):]
			n, _ := gets.LoadOrStore(d, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if d == stallDigest.String() {
				select {
				case stalled <- struct{}{}:
				default:
				}
				select {
				case <-stall:
				case <-r.Context().Done():
					return
				}
			}
		}
		inner.ServeHTTP(w, r)
	}))
	defer reg.Close()
	defer once.Do(func() { close(stall) })
	host := strings.TrimPrefix(reg.URL, "http://")
	ref := host + "/crash/app:1"
	r, _ := name.ParseReference(ref, name.Insecure)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	for _, l := range layers { // the push's own reads do not count
		d, _ := l.Digest()
		if n, ok := gets.Load(d.String()); ok {
			n.(*atomic.Int64).Store(0)
		}
	}
	d := startDaemonB(t, "images: {insecure_registries: ["+host+"]}")

	pull := exec.Command(d.bin, "--socket", d.socket, "image", "pull", ref)
	if err := pull.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		pull.Process.Kill()
		pull.Wait()
		t.Fatal("the pull never reached the second layer")
	}
	// Let the first layer finish unpacking (it is small), then kill the daemon.
	store := filepath.Join(d.dir, "state", "images")
	deadline := time.Now().Add(20 * time.Second)
	for len(dirEntries(filepath.Join(store, "layers"))) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	d.stop(syscall.SIGKILL)
	pull.Wait()
	once.Do(func() { close(stall) })

	d.start()
	if out := d.must("image", "ls"); strings.Contains(out, "crash/app") {
		t.Errorf("after the crash the half-pulled image is listed:\n%s", out)
	}
	if tmp := dirEntries(filepath.Join(store, "tmp")); len(tmp) > 0 {
		t.Errorf("after the restart, work left in the store's tmp: %v", tmp)
	}
	done := dirEntries(filepath.Join(store, "layers"))
	if len(done) != 1 {
		t.Errorf("after the crash, layers %v; want just the one that was complete", done)
	}
	d.must("image", "pull", ref)
	firstDigest, _ := layers[0].Digest()
	for _, c := range []struct {
		digest string
		want   int64
	}{{firstDigest.String(), 1}, {stallDigest.String(), 2}} {
		var got int64
		if n, ok := gets.Load(c.digest); ok {
			got = n.(*atomic.Int64).Load()
		}
		if got != c.want {
			t.Errorf("blob %s was downloaded %d times, want %d (the retry fetches only what was missing)", c.digest[:19], got, c.want)
		}
	}
	if out := d.must("image", "ls"); !strings.Contains(out, "crash/app") {
		t.Errorf("after the retry the image is not listed:\n%s", out)
	}
}

// dirEntries names what dir holds (nothing, if it cannot be read).
func dirEntries(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// quietRegistry keeps a test registry from logging every request.
func quietRegistry() registry.Option { return registry.Logger(netQuietLog()) }
