package secret_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

func newService(t *testing.T) (*secret.Service, string) {
	s, _, dir := newServiceStore(t)
	return s, dir
}

// newServiceStore is newService with the store it keeps its secrets in.
func newServiceStore(t *testing.T) (*secret.Service, *sqlite.Store, string) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := secret.Open(st, filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	return s, st, dir
}

// stateHas says whether any file of dir holds needle.
func stateHas(t *testing.T, dir string, needle []byte) bool {
	found := false
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			found = found || bytes.Contains(b, needle)
		}
		return nil
	})
	return found
}

func TestSealedAtRestAndOpened(t *testing.T) {
	s, dir := newService(t)
	ctx := context.Background()
	value := []byte("ghp_" + strings.Repeat("Zq8", 12) + "\n")
	sec, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "gh", Type: "token", AllowedHosts: []string{"api.github.com"}, Value: value})
	if err != nil {
		t.Fatal(err)
	}
	plain := value[:len(value)-1] // one trailing newline trimmed
	v := sec.Versions[0]
	if v.Preview != "ghp_…q8" || v.Size != len(plain) || !strings.HasPrefix(v.Fingerprint, "hmac-sha256:") {
		t.Errorf("metadata %+v", v)
	}
	if got, err := s.Value(ctx, "alice", "gh", 0); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Value = %q, %v", got, err)
	}
	if stateHas(t, dir, plain) {
		t.Fatal("the plaintext is in the state directory")
	}
	fi, _ := os.Stat(filepath.Join(dir, "secret.key"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode())
	}
	if _, err := s.Value(ctx, "bob", "gh", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another owner's secret: %v", err)
	}

	// Rekey: the value still opens, under a new key; the old key is gone.
	oldKey, _ := os.ReadFile(filepath.Join(dir, "secret.key"))
	if n, err := s.Rekey(ctx); err != nil || n != 1 {
		t.Fatalf("Rekey = %d, %v", n, err)
	}
	newKey, _ := os.ReadFile(filepath.Join(dir, "secret.key"))
	if bytes.Equal(oldKey, newKey) {
		t.Error("the key file did not change")
	}
	if got, err := s.Value(ctx, "alice", "gh", 1); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("after rekey: %q, %v", got, err)
	}

	if _, err := s.Revoke(ctx, "alice", "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Value(ctx, "alice", "gh", 0); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a revoked secret's value: %v", err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	ok := secret.CreateRequest{Name: "x", Type: "password", AllowedHosts: []string{"db.example.com"}, Value: []byte("pw")}
	for name, req := range map[string]secret.CreateRequest{
		"empty value": {Name: "x", Type: "password", AllowedHosts: ok.AllowedHosts, Value: []byte("\n")},
		"64 KiB":      {Name: "x", Type: "password", AllowedHosts: ok.AllowedHosts, Value: bytes.Repeat([]byte("a"), 64<<10)},
		"bad type":    {Name: "x", Type: "key", AllowedHosts: ok.AllowedHosts, Value: ok.Value},
		"bad host":    {Name: "x", Type: "password", AllowedHosts: []string{"http://x"}, Value: ok.Value},
		"bad name":    {Name: "a b", Type: "password", AllowedHosts: ok.AllowedHosts, Value: ok.Value},
	} {
		if _, err := s.Create(ctx, "alice", req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v; want invalid", name, err)
		}
	}
	if list, _ := s.List(ctx, "alice"); len(list) != 0 {
		t.Errorf("bad input stored %d secrets", len(list))
	}
	if sec, err := s.Create(ctx, "alice", ok); err != nil || sec.Versions[0].Preview != "••••••••" {
		t.Errorf("a password's preview: %+v, %v", sec, err)
	}
	if _, err := s.Create(ctx, "alice", ok); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second secret of the name: %v", err)
	}
}

// Concurrent rotations each get their own version, none lost or doubled.
func TestConcurrentRotations(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "k", Type: "token", AllowedHosts: []string{"x.example"}, Value: []byte("v0")}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Rotate(ctx, "alice", "k", []byte{'v', byte('1' + i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	sec, _ := s.Get(ctx, "alice", "k")
	var versions []int
	for _, v := range sec.Versions {
		versions = append(versions, v.Version)
	}
	if !slices.Equal(versions, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("versions after 8 concurrent rotations: %v", versions)
	}
}

// TestRekeyResealsVolumeKeys: a rekey seals every volume's data key under the new node
// key, the data key itself unchanged (so the volume still opens), and the old node key
// opens nothing afterwards.
func TestRekeyResealsVolumeKeys(t *testing.T) {
	ctx := context.Background()
	s, st, _ := newServiceStore(t)
	data := bytes.Repeat([]byte{7}, 64)
	kid, sealed, err := s.SealKey(data)
	if err != nil || bytes.Contains(sealed, data) {
		t.Fatalf("SealKey: %v (sealed holds the key: %v)", err, bytes.Contains(sealed, data))
	}
	v := &store.Volume{ID: "vol_a", Kind: store.VolumeKindVolume, Owner: "alice", Name: "data", KeyID: kid, Key: sealed}
	if err := st.CreateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rekey(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetVolume(ctx, "vol_a")
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyID == kid {
		t.Fatalf("after a rekey the volume key is still sealed under %s", kid)
	}
	if plain, err := s.OpenKey(got.KeyID, got.Key); err != nil || !bytes.Equal(plain, data) {
		t.Fatalf("the re-sealed volume key opens to %x, %v; want the same data key", plain, err)
	}
	if _, err := s.OpenKey(kid, sealed); err == nil {
		t.Fatal("the old node key still opens the old seal after the rekey")
	}
}

// Two rekeys at once each end with every secret and volume key sealed under a key the
// node still has: neither forgets the other's key, nor re-seals a volume for ever.
func TestConcurrentRekeys(t *testing.T) {
	ctx := context.Background()
	s, st, _ := newServiceStore(t)
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "token", Type: "token", Value: []byte("hunter2")}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 64)
	kid, sealed, err := s.SealKey(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateVolume(ctx, &store.Volume{ID: "vol_a", Kind: store.VolumeKindVolume, Owner: "alice", Name: "data", KeyID: kid, Key: sealed}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		done := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := s.Rekey(ctx)
				done <- err
			}()
		}
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("rekey: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("a rekey beside another did not end")
			}
		}
		v, err := st.GetVolume(ctx, "vol_a")
		if err != nil {
			t.Fatal(err)
		}
		if plain, err := s.OpenKey(v.KeyID, v.Key); err != nil || !bytes.Equal(plain, data) {
			t.Fatalf("after two rekeys at once the volume key opens to %x, %v", plain, err)
		}
		if got, err := s.Value(ctx, "alice", "token", 0); err != nil || string(got) != "hunter2" {
			t.Fatalf("after two rekeys at once the secret opens to %q, %v", got, err)
		}
	}
}
