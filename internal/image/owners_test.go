package image

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

var (
	alice = Scope{Owner: "alice"}
	bob   = Scope{Owner: "bob"}
)

func importAs(t *testing.T, s *Store, sc Scope, name string, public bool, archive []byte) (*Image, error) {
	t.Helper()
	path := writeFile(t, t.TempDir(), "a.tar", archive)
	return s.Import(context.Background(), sc, ImportRequest{Archive: path, Name: name, Public: public}, nil)
}

func names(t *testing.T, s *Store, sc Scope) []string {
	t.Helper()
	imgs, err := s.List(sc)
	if err != nil {
		t.Fatalf("List(%s): %v", sc.Owner, err)
	}
	var out []string
	for _, img := range imgs {
		vis := "private"
		if img.Public {
			vis = "public"
		}
		out = append(out, img.Name+"/"+vis+"/"+img.Owner)
	}
	return out
}

// TestOwnersScope: each owner's names are its own; another owner's private image is
// not found by name or digest, cannot be replaced or removed; public images are seen
// by all and changed only by an administrator.
func TestOwnersScope(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	a, err := importAs(t, s, alice, "app", false, mkTar(t, fileEnt("who", "alice", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	if a.Owner != "alice" || a.Public {
		t.Errorf("alice's import = owner %q public %v, want alice's private image", a.Owner, a.Public)
	}

	for _, ref := range []string{"app", a.Digest, hexOf(a.Digest)[:12]} {
		if got, err := s.Get(bob, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("bob Get(%q) = %v, %v; want not_found", ref, got, err)
		}
		if err := s.Remove(bob, ref, nil); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("bob Remove(%q) = %v; want not_found", ref, err)
		}
	}
	if got := names(t, s, bob); !slices.Equal(got, []string{"host/public/"}) {
		t.Errorf("bob's list = %v, want only the host image", got)
	}

	// Bob importing under alice's name makes his own image; alice's is untouched.
	b, err := importAs(t, s, bob, "app", false, mkTar(t, fileEnt("who", "bob", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(alice, "app"); err != nil || got.Digest != a.Digest || got.Owner != "alice" {
		t.Errorf("alice Get(app) after bob's import = %+v, %v; want her own %s", got, err, a.Digest)
	}
	if got, err := s.Get(bob, "app"); err != nil || got.Digest != b.Digest {
		t.Errorf("bob Get(app) = %+v, %v; want his own %s", got, err, b.Digest)
	}
	if err := s.Remove(bob, "app", nil); err != nil {
		t.Fatalf("bob removes his app: %v", err)
	}
	if got, err := s.Get(alice, "app"); err != nil || got.Digest != a.Digest {
		t.Errorf("alice's app after bob removed his: %+v, %v", got, err)
	}
	if _, err := s.Get(bob, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob Get(app) after his remove: %v, want not_found", err)
	}

	// Public images: only an administrator publishes or removes them; everyone uses
	// them; an owner's own image of the same name comes first for that owner.
	if _, err := importAs(t, s, bob, "shared", true, mkTar(t, fileEnt("x", "x", 0o644))); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("bob publishes: %v, want permission_denied", err)
	}
	pub, err := importAs(t, s, admin, "shared", true, mkTar(t, fileEnt("who", "everyone", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(bob, "shared"); err != nil || got.Digest != pub.Digest || !got.Public {
		t.Errorf("bob Get(shared) = %+v, %v; want the public image", got, err)
	}
	if err := s.Remove(bob, "shared", nil); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("bob removes the public image: %v, want permission_denied", err)
	}
	if err := s.Remove(bob, pub.Digest, nil); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("bob removes the public image by digest: %v, want permission_denied", err)
	}
	own, err := importAs(t, s, bob, "shared", false, mkTar(t, fileEnt("who", "bob's shared", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(bob, "shared"); got == nil || got.Digest != own.Digest {
		t.Errorf("bob Get(shared) = %+v, want his own image before the public one", got)
	}
	if got, _ := s.Get(alice, "shared"); got == nil || got.Digest != pub.Digest {
		t.Errorf("alice Get(shared) = %+v, want the public image", got)
	}
	if got, want := names(t, s, bob), []string{"host/public/", "shared/private/bob", "shared/public/local"}; !slices.Equal(got, want) {
		t.Errorf("bob's list = %v, want %v", got, want)
	}
	if err := s.Remove(admin, "shared", nil); err != nil { // the admin has no private "shared": the public one
		t.Fatalf("admin removes the public image: %v", err)
	}
	if got, _ := s.Get(bob, "shared"); got == nil || got.Digest != own.Digest {
		t.Errorf("bob's own shared after the public one went: %+v", got)
	}
	if _, err := s.Get(alice, "shared"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("alice Get(shared) after the public one went: %v, want not_found", err)
	}
}

// TestLayerReuseNeedsTheData: an owner who names the diff id of another owner's private
// layer, without its data, does not get that layer.
func TestLayerReuseNeedsTheData(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	secret := mkTar(t, fileEnt("secret", "alice's secret", 0o600))
	if _, err := importAs(t, s, alice, "private", false, dockerSave(t, "p:1", configJSON(t, secret), secret)); err != nil {
		t.Fatal(err)
	}
	// Bob's config claims alice's layer; his layer.tar is something else.
	forged := dockerSave(t, "f:1", configJSON(t, secret), mkTar(t, fileEnt("nothing", "", 0o644)))
	if img, err := importAs(t, s, bob, "stolen", false, forged); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bob's import naming alice's layer = %+v, %v; want invalid_argument (diff id mismatch)", img, err)
	}
	if _, err := s.Get(bob, "stolen"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob Get(stolen): %v, want not_found", err)
	}
	// With the data, the layer is shared as before.
	img, err := importAs(t, s, bob, "same", false, dockerSave(t, "s:1", configJSON(t, secret), secret))
	if err != nil {
		t.Fatalf("bob imports the same content: %v", err)
	}
	if got := entries(t, s.path("layers")); len(got) != 1 || got[0] != hexOf(img.Layers[0]) {
		t.Errorf("layers = %v, want the one shared layer", got)
	}
	// Removing alice's image keeps the layer bob's image uses.
	if err := s.Remove(alice, "private", nil); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, s.path("layers")); len(got) != 1 {
		t.Errorf("layers after alice's remove = %v, want bob's kept", got)
	}
	assertClean(t, s)
}

// TestReplaceKeepsOrDropsTheOldImage: re-importing a name drops the image it pointed to
// when nothing runs on it, and otherwise keeps it for its owner by digest.
func TestReplaceKeepsOrDropsTheOldImage(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	v1, err := importAs(t, s, alice, "app", false, mkTar(t, fileEnt("v", "1", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	running := func(string) []string { return []string{"alice"} }
	p := writeFile(t, t.TempDir(), "v2.tar", mkTar(t, fileEnt("v", "2", 0o644)))
	v2, err := s.Import(context.Background(), alice, ImportRequest{Archive: p, Name: "app", Users: running}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(alice, v1.Digest); err != nil || got.Name != "" || got.Owner != "alice" {
		t.Errorf("alice Get(v1) while a sandbox runs on it = %+v, %v; want it kept, unnamed", got, err)
	}
	if _, err := s.Get(bob, v1.Digest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob Get(v1): %v, want not_found", err)
	}
	p = writeFile(t, t.TempDir(), "v3.tar", mkTar(t, fileEnt("v", "3", 0o644)))
	if _, err := s.Import(context.Background(), alice, ImportRequest{Archive: p, Name: "app", Users: func(string) []string { return nil }}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.recordPath(v2.Digest)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("v2, replaced with nothing running on it, still has a record: %v", err)
	}
	if _, err := os.Stat(s.path("layers", hexOf(v2.Layers[0]))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("v2's layer is still there: %v", err)
	}
	if got := names(t, s, alice); !slices.Equal(got, []string{"app/private/alice", "host/public/", "/private/alice"}) {
		t.Errorf("alice's list = %v", got)
	}
}

// TestLegacyNamesBecomeLocalPrivate: a store from before owners keeps its names, as
// private images of the local owner.
func TestLegacyNamesBecomeLocalPrivate(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	img, err := importLocal(s, context.Background(), writeFile(t, t.TempDir(), "a.tar", mkTar(t, fileEnt("a", "a", 0o644))), "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	host, err := s.Get(alice, HostName)
	if err != nil {
		t.Fatal(err)
	}
	legacy := `{"old": "` + img.Digest + `", "host": "` + host.Digest + `"}`
	if err := os.WriteFile(s.path("names.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.path("refs.json")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Get(admin, "old"); err != nil || got.Digest != img.Digest || got.Owner != LegacyOwner || got.Public {
		t.Errorf("local Get(old) = %+v, %v; want its private image", got, err)
	}
	if _, err := again.Get(alice, "old"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("alice Get(old): %v, want not_found", err)
	}
	if got, err := again.Get(alice, HostName); err != nil || got.Digest != host.Digest {
		t.Errorf("alice Get(host) = %+v, %v", got, err)
	}
	if _, err := os.Stat(s.path("names.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("names.json still there after the migration: %v", err)
	}
}
