package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
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

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The helpers here serve the images the pull tests build from a registry on loopback.

// testRegistry is go-containerregistry's in-process registry on loopback, behind a
// handler that counts the blob requests of pulls and lets a test answer some itself.
type testRegistry struct {
	srv  *httptest.Server
	host string
	push http.RoundTripper

	mu          sync.Mutex
	gets, heads map[string]int // by blob digest
	hook        func(w http.ResponseWriter, r *http.Request) bool
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr := &testRegistry{gets: map[string]int{}, heads: map[string]int{}}
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		if _, blob, ok := strings.Cut(r.URL.Path, "/blobs/"); ok && strings.HasPrefix(blob, "sha256:") {
			switch r.Method {
			case http.MethodGet:
				tr.gets[blob]++
			case http.MethodHead:
				tr.heads[blob]++
			}
		}
		hook := tr.hook
		tr.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		inner.ServeHTTP(w, r)
	}))
	push := &http.Transport{}
	tr.push = push
	t.Cleanup(func() {
		push.CloseIdleConnections()
		tr.srv.Close()
	})
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	return tr
}

func (r *testRegistry) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = h
}

// counts returns how many GETs and HEADs blob had since the last reset.
func (r *testRegistry) counts(blob string) (gets, heads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[blob], r.heads[blob]
}

func (r *testRegistry) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.gets)
	clear(r.heads)
}

// pushImage stores img as repoTag ("repo:tag") and returns the reference to pull.
func (r *testRegistry) pushImage(t *testing.T, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(r.push)); err != nil {
		t.Fatalf("push %s: %v", repoTag, err)
	}
	r.reset()
	return ref.Name()
}

func (r *testRegistry) pushIndex(t *testing.T, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithTransport(r.push)); err != nil {
		t.Fatalf("push index %s: %v", repoTag, err)
	}
	r.reset()
	return ref.Name()
}

// tarLayer is a registry layer of the tar b (gzip-compressed by go-containerregistry,
// unless b already is).
func tarLayer(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a linux/GOARCH image of the tar layers, with cfg.
func testImage(t *testing.T, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		ls = append(ls, tarLayer(t, b))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// imageFacts returns img's manifest digest and its layers' blob digests and diff ids.
func imageFacts(t *testing.T, img v1.Image) (digest string, blobs, diffIDs []string) {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		b, _ := l.Digest()
		id, _ := l.DiffID()
		blobs, diffIDs = append(blobs, b.String()), append(diffIDs, id.String())
	}
	return d.String(), blobs, diffIDs
}

// hermeticKeychain points the docker config keychain at an empty directory of the
// test's own and returns it.
func hermeticKeychain(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("DOCKER_CONFIG", dir)
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("XDG_CONFIG_HOME", dir)
	return dir
}

// pullAs pulls ref for sc from a loopback registry, collecting the events.
func pullAs(ctx context.Context, s *Store, sc Scope, req PullRequest, events *[]PullEvent) (*Image, error) {
	req.Insecure = true
	return s.Pull(ctx, sc, req, func(ev PullEvent) {
		if events != nil {
			*events = append(*events, ev)
		}
	})
}

// statuses lists the statuses of the events of layer (0: image-level events).
func statuses(events []PullEvent, layer int) []string {
	var out []string
	for _, ev := range events {
		if ev.Layer == layer && (len(out) == 0 || out[len(out)-1] != ev.Status) {
			out = append(out, ev.Status)
		}
	}
	return out
}

// assertNoImage checks that a failed pull left no record, no ref, nothing in tmp, and
// no layer directory that a pending pull does not keep.
func assertNoImage(t *testing.T, s *Store, sc Scope, name string) {
	t.Helper()
	assertClean(t, s)
	if got, err := s.Get(sc, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(%q) after the failed pull = %+v, %v; want not_found", name, got, err)
	}
	if got := entries(t, s.path("images")); len(got) != 1 {
		t.Errorf("records = %v, want only the host image's", got)
	}
	pending, _, err := s.pendings()
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, p := range pending {
		for _, l := range p.Layers {
			kept[hexOf(l.DiffID)] = true
		}
	}
	for _, l := range entries(t, s.path("layers")) {
		if !kept[l] {
			t.Errorf("layer %s is left and no pending pull keeps it", l)
		}
	}
}

func otherPlatforms() []string {
	var out []string
	for _, a := range []string{"arm64", "s390x", "amd64"} {
		if a != goruntime.GOARCH {
			out = append(out, a)
		}
	}
	return out[:2]
}

// TestPullReferencesAndNames: references parse to their canonical form or are refused
// with the form to use; local names take references but stay strict.
func TestPullReferencesAndNames(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		"python:3.12-slim":                 "index.docker.io/library/python:3.12-slim",
		"python":                           "index.docker.io/library/python:latest",
		"ghcr.io/o/r:tag":                  "ghcr.io/o/r:tag",
		"127.0.0.1:5000/x@sha256:" + hex64: "127.0.0.1:5000/x@sha256:" + hex64,
	} {
		ref, err := parseReference(in, false)
		if err != nil || ref.Name() != want {
			t.Errorf("parseReference(%q) = %v, %v; want %s", in, ref, err, want)
		}
	}
	for _, bad := range []string{"", "Python:3", "a b", " python", "x@sha256:123", "x@sha512:" + hex64 + hex64, "x//y", "a/../b", "-x", "x:-tag", "x@sha256:zz"} {
		_, err := parseReference(bad, false)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "[registry[:port]/]repository[:tag]") {
			t.Errorf("parseReference(%q) = %v; want invalid_argument giving the form", bad, err)
		}
	}
	for _, good := range []string{"python:3.12-slim", "ghcr.io/o/r:tag", "127.0.0.1:5000/x:1", "x@sha256:" + hex64, "127.0.0.1:5000/x@sha256:" + hex64} {
		if err := validName(good); err != nil {
			t.Errorf("validName(%q) = %v, want it accepted", good, err)
		}
	}
	for _, bad := range []string{"a..b", "a//b", "x@sha256:123", "x@" + hex64, "x@sha256:" + hex64 + "@sha256:" + hex64, "a b", "x@", strings.Repeat("a", 200) + "@sha256:" + hex64} {
		if err := validName(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("validName(%q) = %v, want invalid_argument", bad, err)
		}
	}
	// A reference that is no valid local name asks for a name before anything is fetched.
	s := &Store{}
	if _, err := s.Pull(context.Background(), alice, PullRequest{Ref: "docker.io/library/Python"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Pull of an invalid reference: %v, want invalid_argument", err)
	}
	if _, err := s.Pull(context.Background(), alice, PullRequest{Ref: "python:Latest"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "give the image a name") {
		t.Errorf("Pull of python:Latest without a name: %v, want invalid_argument asking for a name", err)
	}
	if _, err := s.Pull(context.Background(), alice, PullRequest{Ref: "python:3", Public: true}, nil); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("public Pull by an owner: %v, want permission_denied", err)
	}
}

// TestPullRequestHidesThePassword: printing a request never shows its password.
func TestPullRequestHidesThePassword(t *testing.T) {
	req := PullRequest{Ref: "x:1", Username: "u", Password: "hunter2"}
	for _, got := range []string{req.String(), req.GoString(), fmt.Sprintf("%v", req), fmt.Sprintf("%#v", req), fmt.Sprintf("%+v", req)} {
		if strings.Contains(got, "hunter2") || !strings.Contains(got, "<redacted>") {
			t.Errorf("printed request %q shows the password or hides that it has one", got)
		}
	}
}

// TestPullErrors: an unknown tag or repository is not found, a loopback registry needs
// Insecure, and one that is not there is unavailable, saying why; each names the image.
func TestPullErrors(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	ref := reg.pushImage(t, "there:1", testImage(t, v1.Config{}, mkTar(t, fileEnt("a", "a", 0o644))))
	gone := httptest.NewServer(http.NotFoundHandler())
	goneHost := strings.TrimPrefix(gone.URL, "http://")
	gone.Close()
	for _, tc := range []struct {
		name     string
		req      PullRequest
		class    error
		msg      string
		insecure bool
	}{
		{"unknown tag", PullRequest{Ref: reg.host + "/there:2"}, errdefs.ErrNotFound, "pull " + reg.host + "/there:2: registry " + reg.host + " does not have the image", true},
		{"unknown repository", PullRequest{Ref: reg.host + "/nowhere:1"}, errdefs.ErrNotFound, "does not have the image", true},
		{"loopback not allowed", PullRequest{Ref: ref}, errdefs.ErrPermissionDenied, "registry address 127.0.0.1 is loopback", false},
		{"no registry there", PullRequest{Ref: goneHost + "/x:1"}, errdefs.ErrUnavailable, "pull " + goneHost + "/x:1: cannot reach registry " + goneHost + ": connect: connection refused", true},
		{"no such host", PullRequest{Ref: "registry.invalid/x:1"}, errdefs.ErrUnavailable, "cannot reach registry registry.invalid: lookup registry.invalid: no such host", false},
	} {
		tc.req.Name, tc.req.Insecure = "x", tc.insecure
		_, err := s.Pull(context.Background(), alice, tc.req, nil)
		t.Logf("%s: %v", tc.name, err)
		if !errors.Is(err, tc.class) || !strings.Contains(errdefs.Message(err), tc.msg) {
			t.Errorf("%s: Pull = %v; want %v saying %q", tc.name, err, tc.class, tc.msg)
		}
		assertNoImage(t, s, alice, "x")
	}
}

// TestRegistryGuards: a pull dials public addresses, private ones only when insecure,
// metadata and unroutable ones never; and speaks plain http only when insecure.
func TestRegistryGuards(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"8.8.8.8:443", false, true},
		{"[2606:4700::1111]:443", false, true},
		{"127.0.0.1:5000", false, false},
		{"127.0.0.1:5000", true, true},
		{"[::1]:5000", true, true},
		{"10.1.2.3:443", false, false},
		{"192.168.1.1:443", true, true},
		{"[::ffff:127.0.0.1]:443", false, false},
		{"169.254.169.254:80", true, false},
		{"0.0.0.0:443", true, false},
		{"[fe80::1]:443", false, false},
	} {
		err := checkRegistryAddr(tc.addr, tc.insecure)
		if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, errdefs.ErrPermissionDenied)) {
			t.Errorf("checkRegistryAddr(%s, insecure %v) = %v; want allowed %v (or permission_denied)", tc.addr, tc.insecure, err, tc.ok)
		}
	}
	ok := http.RoundTripper(roundTripFunc(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200}, nil }))
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://r.example/v2/", false, true},
		{"http://r.example/v2/", false, false},
		{"http://r.example/v2/", true, true},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		_, err := (&guardedTransport{inner: ok, insecure: tc.insecure}).RoundTrip(req)
		if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, errPlainHTTP)) {
			t.Errorf("RoundTrip(%s, insecure %v) = %v; want allowed %v", tc.url, tc.insecure, err, tc.ok)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
