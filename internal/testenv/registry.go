package testenv

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an OCI registry on loopback (go-containerregistry's, in memory) that
// counts the manifest requests for each repository. A node reaches it when its
// configuration lists Host in InsecureRegistries.
type Registry struct {
	Host      string // host:port
	mu        sync.Mutex
	manifests map[string]int // repository -> manifest requests, pushes' included
}

// NewRegistry starts a registry that stops when the test ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{manifests: map[string]int{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/"); ok {
			r.mu.Lock()
			r.manifests[repo]++
			r.mu.Unlock()
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// PushRandom pushes an image of two random layers as repo:1 and returns its reference
// and digest.
func (r *Registry) PushRandom(t testing.TB, repo string) (ref, digest string) {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref = r.Host + "/" + repo + ":1"
	nr, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(nr, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return ref, d.String()
}

// ManifestRequests is how many manifest requests repo has had.
func (r *Registry) ManifestRequests(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manifests[repo]
}
