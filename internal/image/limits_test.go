package image

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// zeros is a tar holding one file of n zero bytes: it compresses about a thousandfold.
func zeros(t *testing.T, n int) []byte {
	return mkTar(t, ent{Header: tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Mode: 0o644, ModTime: testTime}, Body: string(make([]byte, n))})
}

// assertNothingImported checks a refused import left no layer, record or temp file.
func assertNothingImported(t *testing.T, s *Store, sc Scope, wantNames int) {
	t.Helper()
	assertClean(t, s)
	if got := entries(t, s.path("layers")); len(got) != wantNames {
		t.Errorf("layers = %v, want %d", got, wantNames)
	}
	if got := entries(t, s.path("images")); len(got) != wantNames+1 { // + the host image
		t.Errorf("records = %v, want %d and the host image's", got, wantNames)
	}
	if imgs, _ := s.List(sc); len(imgs) != wantNames+1 {
		t.Errorf("images = %v, want %d and the host image", imgs, wantNames)
	}
}

// TestImportLimits imports archives past each limit: every one is refused with a
// message naming the limit, and nothing of it stays on disk.
func TestImportLimits(t *testing.T) {
	requireRoot(t)
	bomb := zeros(t, 64<<20)
	random := make([]byte, 2<<20)
	rand.Read(random)
	// A header that claims a 1 TiB file: the entry is charged before anything is written.
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "huge", Mode: 0o644, Size: 1 << 40})
	tw.Flush()

	for _, tc := range []struct {
		name    string
		limits  Limits
		archive []byte
		class   error
		msg     string
	}{
		{"gzip bomb, whole archive", Limits{}, gz(t, bomb), errdefs.ErrInvalidArgument, "the archive decompresses more than 100 times over"},
		{"gzip bomb, one layer", Limits{}, dockerSave(t, "b:1", configJSON(t, bomb), gz(t, bomb)), errdefs.ErrInvalidArgument, "a layer decompresses more than 100 times over"},
		{"bomb under a high ratio, unpacked limit", Limits{Unpacked: 8 << 20, Ratio: 1 << 20}, gz(t, bomb), errdefs.ErrInvalidArgument, "the archive decompresses to more than 8 MiB"},
		{"unpacked limit", Limits{Unpacked: 1 << 20}, mkTar(t, fileEnt("random", string(random), 0o644)), errdefs.ErrInvalidArgument, "unpacks to more than 1 MiB"},
		{"claimed size", Limits{}, dockerSave(t, "h:1", configJSON(t, huge.Bytes()), huge.Bytes()), errdefs.ErrInvalidArgument, "unpacks to more than 8 GiB"},
		{"quota", Limits{Quota: 1 << 20}, mkTar(t, fileEnt("random", string(random), 0o644)), errdefs.ErrQuotaExceeded, `quota of owner "alice": 0 B of 1 MiB in use`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			s.SetLimits(tc.limits)
			_, err := importAs(t, s, alice, "x", false, tc.archive)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Import error = %v, want class %v saying %q", err, tc.class, tc.msg)
			}
			assertNothingImported(t, s, alice, 0)
		})
	}
}

// TestQuotaCountsEveryImageOfTheOwner: an owner's second image that passes the quota is
// refused; the administrator is not held to it, and other owners have their own.
func TestQuotaCountsEveryImageOfTheOwner(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	s.SetLimits(Limits{Quota: 1 << 20})
	file := func() []byte {
		b := make([]byte, 600<<10)
		rand.Read(b)
		return mkTar(t, fileEnt("f", string(b), 0o644))
	}
	if _, err := importAs(t, s, alice, "one", false, file()); err != nil {
		t.Fatal(err)
	}
	_, err := importAs(t, s, alice, "two", false, file())
	if !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(err.Error(), "quota of owner \"alice\"") {
		t.Fatalf("alice's second image: %v, want quota_exceeded", err)
	}
	assertNothingImported(t, s, alice, 1)
	if _, err := importAs(t, s, bob, "two", false, file()); err != nil {
		t.Errorf("bob's first image: %v", err)
	}
	if _, err := importAs(t, s, admin, "big", false, file()); err != nil {
		t.Errorf("the administrator's image: %v", err)
	}
	if _, err := importAs(t, s, admin, "big2", false, file()); err != nil {
		t.Errorf("the administrator's second image: %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"}, {8 << 30, "8 GiB"}, {2 << 40, "2 TiB"}} {
		if got := formatSize(tc.n); got != tc.want {
			t.Errorf("formatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
