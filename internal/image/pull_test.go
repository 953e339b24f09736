package image

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestPullMultiArch: the manifest for linux/GOARCH is chosen from an index; the record
// is pinned to it and names the canonical reference; an index without this platform
// is refused with the platforms it has.
func TestPullMultiArch(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	ours := testImage(t, v1.Config{Env: []string{"A=1"}}, baseLayer(t))
	other, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	others := otherPlatforms()
	attestation, _ := random.Image(64, 1)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: others[0]}}},
		mutate.IndexAddendum{Add: ours, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}}},
		mutate.IndexAddendum{Add: attestation, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}},
	)
	ref := reg.pushIndex(t, "multi:1", idx)
	digest, blobs, diffIDs := imageFacts(t, ours)

	var events []PullEvent
	img, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref}, &events)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if img.Digest != digest || img.Reference != reg.host+"/multi:1" || img.Name != ref || !reflect.DeepEqual(img.Layers, diffIDs) {
		t.Errorf("image = digest %s reference %q name %q layers %v\nwant      digest %s reference %q name %q layers %v",
			img.Digest, img.Reference, img.Name, img.Layers, digest, reg.host+"/multi:1", ref, diffIDs)
	}
	if got, err := s.Get(alice, ref); err != nil || got.Digest != digest || got.Reference != img.Reference {
		t.Errorf("Get(%q) = %+v, %v; want the pulled image with its reference", ref, got, err)
	}
	if got := statuses(events, 0); !reflect.DeepEqual(got, []string{"resolving", "complete"}) {
		t.Errorf("image events = %v, want resolving then complete", got)
	}
	if got := statuses(events, 1); !reflect.DeepEqual(got, []string{"downloading", "verifying", "done"}) {
		t.Errorf("layer events = %v, want downloading, verifying, done", got)
	}
	if last := events[len(events)-1]; last.Done != last.Total || last.Total <= 0 || last.Ref != reg.host+"/multi:1" {
		t.Errorf("last event = %+v, want complete with all bytes and the canonical reference", last)
	}
	if gets, _ := reg.counts(blobs[0]); gets != 1 {
		t.Errorf("layer blob fetched %d times, want once", gets)
	}
	assertClean(t, s)

	// An index without this platform.
	second, _ := random.Image(512, 1)
	foreign := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: others[0]}}},
		mutate.IndexAddendum{Add: second, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: others[1]}}},
	)
	fref := reg.pushIndex(t, "foreign:1", foreign)
	_, err = pullAs(context.Background(), s, alice, PullRequest{Ref: fref}, nil)
	want := "has no linux/" + goruntime.GOARCH + " manifest; it has: linux/" + others[0] + ", linux/" + others[1]
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(errdefs.Message(err), want) || !strings.Contains(errdefs.Message(err), reg.host+"/foreign:1") {
		t.Errorf("pull of a foreign index: %v; want invalid_argument naming the image and saying %q", err, want)
	}
	if _, err := s.Get(alice, fref); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(%q) after the refused pull: %v, want not_found", fref, err)
	}
}

// TestPullLayers: a two-layer image with a hard link, a whiteout and an opaque directory
// unpacks as an import of it does.
func TestPullLayers(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	ref := reg.pushImage(t, "layers:1", testImage(t, v1.Config{}, baseLayer(t), topLayer(t)))
	img, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "layers"}, nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	ld := s.LayerDirs(img)
	if len(ld) != 2 {
		t.Fatalf("LayerDirs = %v, want 2", ld)
	}
	if got := readIn(t, ld[0], "etc/motd"); got != "hello" {
		t.Errorf("base etc/motd = %q", got)
	}
	if st := lstat(t, filepath.Join(ld[0], "etc/motd2")); st.Nlink != 2 {
		t.Errorf("etc/motd2 nlink %d, want a hard link", st.Nlink)
	}
	if st := lstat(t, filepath.Join(ld[0], "home/u")); st.Uid != 1000 || st.Mode&0o777 != 0o750 {
		t.Errorf("home/u: uid %d mode %o; want 1000 and 750", st.Uid, st.Mode&0o777)
	}
	if st := lstat(t, filepath.Join(ld[1], "etc/motd")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("top etc/motd: mode %o rdev %d, want a 0:0 whiteout", st.Mode, st.Rdev)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(ld[1], "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("top var/cache opaque = %q, %v", buf[:n], err)
	}
	if got := readIn(t, ld[1], "var/cache/new"); got != "n" {
		t.Errorf("top var/cache/new = %q", got)
	}
	if img.Size != int64(len("hello")+len("k")+len("o")+len("su")+len("a")+len("n")) {
		t.Errorf("Size = %d, want the unpacked bytes", img.Size)
	}
	assertClean(t, s)
}

// TestPullRefusesBadLayers: a blob the registry alters, and layers that attack the
// unpacker, are refused naming the image and the layer; nothing of them stays.
func TestPullRefusesBadLayers(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	sentinel := t.TempDir()
	good := mkTar(t, fileEnt("good", "g", 0o644))
	for _, tc := range []struct {
		name  string
		layer []byte                 // the second layer
		alter func(blob []byte) bool // alters the second blob as served; false: serve it as it is
		msg   string
	}{
		{"digest mismatch, valid gzip", baseLayer(t), func(b []byte) bool { b[4] ^= 1; return true }, "layer blob has digest"},
		{"garbled data", baseLayer(t), func(b []byte) bool { b[len(b)/2] ^= 0xff; b[len(b)/2+1] ^= 0xff; return true }, "layer"},
		{"symlink escape", mkTar(t, symlinkEnt("a", sentinel), fileEnt("a/pwned", "x", 0o644)), nil, "symlink"},
		{"absolute path", mkTar(t, fileEnt(sentinel+"/pwned", "x", 0o644)), nil, "absolute path"},
		{"dotdot", mkTar(t, fileEnt("../../../../.."+sentinel+"/pwned", "x", 0o644)), nil, "escapes the layer root"},
		{"gzip bomb", gz(t, zeros(t, 64<<20)), nil, "decompresses more than 100 times over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			s := newStore(t)
			img := testImage(t, v1.Config{}, good, tc.layer)
			ref := reg.pushImage(t, "bad:1", img)
			_, blobs, diffIDs := imageFacts(t, img)
			if tc.alter != nil {
				ls, _ := img.Layers()
				rc, err := ls[1].Compressed()
				if err != nil {
					t.Fatal(err)
				}
				served, _ := io.ReadAll(rc)
				rc.Close()
				tc.alter(served)
				reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
					if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+blobs[1]) {
						return false
					}
					w.Write(served)
					return true
				})
			}
			_, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "victim"}, nil)
			msg := errdefs.Message(err)
			t.Logf("refused: %s", msg)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(msg, "pull "+reg.host+"/bad:1: layer 2 of 2 ("+blobs[1]+")") || !strings.Contains(msg, tc.msg) {
				t.Fatalf("Pull = %v\nwant invalid_argument naming the image and layer 2 of 2 and saying %q", err, tc.msg)
			}
			if got := entries(t, sentinel); len(got) != 0 {
				t.Errorf("sentinel holds %v", got)
			}
			if _, err := os.Lstat(s.path("layers", hexOf(diffIDs[1]))); !os.IsNotExist(err) {
				t.Errorf("the refused layer is under layers/: %v", err)
			}
			assertNoImage(t, s, alice, "victim")
		})
	}
}

// TestPullAuth: a registry behind basic auth refuses no or wrong credentials, refuses
// an account without access, and serves the right ones, given or from config.json.
func TestPullAuth(t *testing.T) {
	requireRoot(t)
	dockerConfig := hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	ref := reg.pushImage(t, "private/app:1", testImage(t, v1.Config{}, mkTar(t, fileEnt("a", "a", 0o644))))
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		switch user, pass, ok := r.BasicAuth(); {
		case ok && user == "alice" && pass == "s3cret":
			return false
		case ok && user == "eve" && pass == "evepw" && r.URL.Path != "/v2/":
			http.Error(w, `{"errors":[{"code":"DENIED","message":"no access"}]}`, http.StatusForbidden)
			return true
		case ok && user == "eve" && pass == "evepw":
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"who are you"}]}`, http.StatusUnauthorized)
		return true
	})
	for _, tc := range []struct {
		name, user, pass string
		class            error
	}{
		{"no credentials", "", "", errdefs.ErrUnauthenticated},
		{"wrong password", "alice", "nope", errdefs.ErrUnauthenticated},
		{"no access", "eve", "evepw", errdefs.ErrPermissionDenied},
	} {
		_, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "app", Username: tc.user, Password: tc.pass}, nil)
		t.Logf("%s: %s", tc.name, errdefs.Message(err))
		if !errors.Is(err, tc.class) || !strings.Contains(errdefs.Message(err), reg.host) {
			t.Errorf("%s: Pull = %v; want %v naming the registry", tc.name, err, tc.class)
		}
		if tc.pass != "" && strings.Contains(err.Error(), tc.pass) {
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
		assertNoImage(t, s, alice, "app")
	}
	if _, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "app", Username: "alice", Password: "s3cret"}, nil); err != nil {
		t.Errorf("Pull with the right credentials: %v", err)
	}
	// The node's docker config.json gives them when the request does not.
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	writeFile(t, dockerConfig, "config.json", []byte(`{"auths":{"`+reg.host+`":{"auth":"`+auth+`"}}}`))
	if _, err := pullAs(context.Background(), s, bob, PullRequest{Ref: ref, Name: "app"}, nil); err != nil {
		t.Errorf("Pull with credentials from config.json: %v", err)
	}
}

// TestPullTimeouts: a registry that does not answer, and one that stalls in the middle
// of a layer, fail the pull with unavailable once RegistryTimeout passes, well before
// the caller's deadline.
func TestPullTimeouts(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	layer := mkTar(t, fileEnt("random", strings.Repeat("0123456789abcdef", 8<<10), 0o644))
	img := testImage(t, v1.Config{}, layer)
	_, blobs, _ := imageFacts(t, img)
	ls, _ := img.Layers()
	rc, err := ls[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	blob, _ := io.ReadAll(rc)
	rc.Close()
	for _, tc := range []struct {
		name string
		hook func(w http.ResponseWriter, r *http.Request) bool
		msg  string
	}{
		{"no answer", func(w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done()
			return true
		}, "did not answer within 200ms"},
		{"stalled layer", func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+blobs[0]) {
				return false
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
			w.Write(blob[:len(blob)/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return true
		}, "layer 1 of 1 (" + blobs[0] + "): registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			s := newStore(t)
			s.SetLimits(Limits{RegistryTimeout: 200 * time.Millisecond})
			ref := reg.pushImage(t, "slow:1", img)
			reg.setHook(tc.hook)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, err := pullAs(ctx, s, alice, PullRequest{Ref: ref, Name: "slow"}, nil)
			if ctx.Err() != nil {
				t.Fatalf("the pull outlived the caller's deadline: %v", err)
			}
			t.Logf("refused: %s", errdefs.Message(err))
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), tc.msg) {
				t.Fatalf("Pull = %v; want unavailable saying %q", err, tc.msg)
			}
			assertNoImage(t, s, alice, "slow")
		})
	}
}

// interruptedPull pulls a three-layer image and cancels the pull once its first layer
// is done, while the registry holds back the other two. It returns the reference and
// the image's blob digests and diff ids.
func interruptedPull(t *testing.T, s *Store, reg *testRegistry) (string, []string, []string) {
	t.Helper()
	layers := [][]byte{
		mkTar(t, fileEnt("one", strings.Repeat("1", 1000), 0o644)),
		mkTar(t, fileEnt("two", "2", 0o644)),
		mkTar(t, fileEnt("three", "3", 0o644)),
	}
	img := testImage(t, v1.Config{}, layers...)
	ref := reg.pushImage(t, "resume:1", img)
	_, blobs, diffIDs := imageFacts(t, img)
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && (strings.HasSuffix(r.URL.Path, blobs[1]) || strings.HasSuffix(r.URL.Path, blobs[2])) {
			<-r.Context().Done()
			return true
		}
		return false
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Pull(ctx, alice, PullRequest{Ref: ref, Name: "resume", Insecure: true}, func(ev PullEvent) {
		if ev.Layer == 1 && ev.Status == "done" {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Pull = %v, want context.Canceled", err)
	}
	reg.setHook(nil)
	return ref, blobs, diffIDs
}

// collect runs a collection as a failed install or Open would.
func collect(t *testing.T, s *Store) {
	t.Helper()
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	s.collectLocked()
	unlock()
}

// TestPullResumes: the layers an interrupted pull finished survive collection (and
// count in the owner's quota) for a day; a retry downloads only the others.
func TestPullResumes(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	ref, blobs, diffIDs := interruptedPull(t, s, reg)

	assertNoImage(t, s, alice, "resume")
	later := time.Now().Add(23 * time.Hour)
	s.clock = func() time.Time { return later }
	collect(t, s)
	if got := entries(t, s.path("layers")); !reflect.DeepEqual(got, []string{hexOf(diffIDs[0])}) {
		t.Fatalf("layers after the interrupted pull and a collection = %v, want the finished first layer %s", got, hexOf(diffIDs[0]))
	}
	refs, err := s.readRefs()
	if err != nil {
		t.Fatal(err)
	}
	if used, err := s.usage(refs, alice.Owner, "", nil); err != nil || used != 1000 {
		t.Errorf("alice's usage = %d, %v; want the 1000 bytes of her pending layer", used, err)
	}

	reg.reset()
	var events []PullEvent
	img, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "resume"}, &events)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !reflect.DeepEqual(img.Layers, diffIDs) {
		t.Errorf("layers = %v, want %v", img.Layers, diffIDs)
	}
	for i, want := range []int{0, 1, 1} {
		if gets, _ := reg.counts(blobs[i]); gets != want {
			t.Errorf("retry fetched layer %d %d times, want %d", i+1, gets, want)
		}
	}
	if got := statuses(events, 1); !reflect.DeepEqual(got, []string{"cached"}) {
		t.Errorf("layer 1 events on retry = %v, want cached", got)
	}
	if got := entries(t, s.path("pending")); len(got) != 0 {
		t.Errorf("pending records after the pull succeeded = %v, want none", got)
	}
	assertClean(t, s)
}

// TestPendingPullExpires: a day after an interrupted pull, collection takes its layers.
func TestPendingPullExpires(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	interruptedPull(t, s, reg)
	if got := entries(t, s.path("layers")); len(got) != 1 {
		t.Fatalf("layers after the interrupted pull = %v, want the finished one", got)
	}
	later := time.Now().Add(pendingTTL + time.Hour)
	s.clock = func() time.Time { return later }
	collect(t, s)
	if got := entries(t, s.path("layers")); len(got) != 0 {
		t.Errorf("layers a day later = %v, want none", got)
	}
	if got := entries(t, s.path("pending")); len(got) != 0 {
		t.Errorf("pending records a day later = %v, want none", got)
	}
	if got := entries(t, s.path("blobs")); len(got) != 0 {
		t.Errorf("blob notes a day later = %v, want none", got)
	}
}

// TestPullReuse: pulling again downloads nothing; another owner, who does not see the
// first owner's image, reuses its layers only after a HEAD of each blob succeeds on the
// registry they were downloaded from; from another registry, or when the HEAD fails,
// the layers are downloaded.
func TestPullReuse(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	regA, regB := newTestRegistry(t), newTestRegistry(t)
	defer regA.srv.Close()
	defer regB.srv.Close()
	s := newStore(t)
	img := testImage(t, v1.Config{}, baseLayer(t), topLayer(t))
	ref := regA.pushImage(t, "alice/app:1", img)
	bobRef := regA.pushImage(t, "bob/app:2", img)
	refB := regB.pushImage(t, "mirror/app:1", img)
	_, blobs, _ := imageFacts(t, img)

	pulls := []struct {
		who        Scope
		reg        *testRegistry
		ref        string
		gets, head int // per layer
		status     string
		refuseHEAD bool
	}{
		{alice, regA, ref, 1, 0, "done", false},
		{alice, regA, ref, 0, 0, "cached", false},
		{bob, regA, bobRef, 0, 1, "cached", false},
		{Scope{Owner: "carol"}, regB, refB, 1, 0, "done", false},
		{Scope{Owner: "dave"}, regA, ref, 1, 1, "done", true},
	}
	for i, p := range pulls {
		p.reg.reset()
		p.reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
			if p.refuseHEAD && r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/blobs/") {
				w.WriteHeader(http.StatusNotFound)
				return true
			}
			return false
		})
		var events []PullEvent
		got, err := pullAs(context.Background(), s, p.who, PullRequest{Ref: p.ref, Name: "app"}, &events)
		if err != nil {
			t.Fatalf("pull %d (%s): %v", i, p.who.Owner, err)
		}
		if got.Reference != p.ref || got.Owner != p.who.Owner {
			t.Errorf("pull %d: reference %q owner %q, want %q and %q", i, got.Reference, got.Owner, p.ref, p.who.Owner)
		}
		for l, blob := range blobs {
			gets, heads := p.reg.counts(blob)
			if gets != p.gets || heads != p.head {
				t.Errorf("pull %d (%s): layer %d had %d GETs and %d HEADs, want %d and %d", i, p.who.Owner, l+1, gets, heads, p.gets, p.head)
			}
			if st := statuses(events, l+1); st[len(st)-1] != p.status {
				t.Errorf("pull %d (%s): layer %d events %v, want them to end %s", i, p.who.Owner, l+1, st, p.status)
			}
		}
	}
	if got := entries(t, s.path("layers")); len(got) != 2 {
		t.Errorf("layers = %v, want the two, shared", got)
	}
	// Each owner sees the reference it pulled, not another's.
	if got, err := s.Get(bob, "app"); err != nil || got.Reference != bobRef {
		t.Errorf("bob's app = %+v, %v; want reference %s", got, err, bobRef)
	}
	regA.srv.Close()
	regB.srv.Close()
}

// TestPullConfig: the image config's Env, WorkingDir, User, Entrypoint and Cmd are the
// record's.
func TestPullConfig(t *testing.T) {
	requireRoot(t)
	hermeticKeychain(t)
	reg := newTestRegistry(t)
	s := newStore(t)
	cfg := v1.Config{Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"}, WorkingDir: "/srv", User: "1000:1000",
		Entrypoint: []string{"/bin/app"}, Cmd: []string{"--serve"}}
	ref := reg.pushImage(t, "cfg:1", testImage(t, cfg, mkTar(t, fileEnt("a", "a", 0o644))))
	img, err := pullAs(context.Background(), s, alice, PullRequest{Ref: ref, Name: "cfg"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd}
	got, err := s.Get(alice, "cfg")
	if err != nil || !reflect.DeepEqual(got.Config, want) || !reflect.DeepEqual(img.Config, want) {
		t.Errorf("config = %+v (Get: %+v, %v)\nwant     %+v", img.Config, got, err, want)
	}
}
