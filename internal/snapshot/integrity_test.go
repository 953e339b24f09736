package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestDamagedChunkFailsVerifyAndRestore damages one chunk of a snapshot and expects
// Verify and Restore to name it and Restore to leave nothing.
func TestDamagedChunkFailsVerifyAndRestore(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, p string)
	}{
		{"flipped byte", func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			must(t, err)
			b[len(b)/2] ^= 0x40
			must(t, os.WriteFile(p, b, 0o600))
		}},
		{"missing", func(t *testing.T, p string) { must(t, os.Remove(p)) }},
		{"truncated", func(t *testing.T, p string) { must(t, os.Truncate(p, 10)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			src := newLayer(t, baseA)
			put(t, src, "a", randBytes(1, 3*ChunkSize), 0o644, baseA, 0)
			put(t, src, "b/c", []byte("small"), 0o644, baseA, 0)
			m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
			must(t, err)
			bad := m.Entries[1].Chunks[1].Digest // the second chunk of "a"
			c.damage(t, s.chunkPath(strings.TrimPrefix(bad, "sha256:")))

			err = s.Verify(context.Background(), m.ID)
			checkCorrupt(t, "Verify", err, bad)
			dst := filepath.Join(t.TempDir(), "restored")
			err = s.Restore(context.Background(), m.ID, dst, baseB)
			checkCorrupt(t, "Restore", err, bad)
			for _, p := range []string{dst, dst + ".tmp"} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after a failed Restore, %s: %v; want it absent", p, err)
				}
			}
		})
	}
}

// TestCorruptionFoundWhileCopying damages a chunk so that only hashing finds it (same
// size), and checks a Restore that already wrote other files removes them.
func TestCorruptionFoundWhileCopying(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := newLayer(t, baseA)
	for i := range 8 {
		put(t, src, filepath.Join("f", string(rune('a'+i))), randBytes(uint64(i), ChunkSize), 0o644, baseA, 0)
	}
	m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	bad := m.Entries[len(m.Entries)-1].Chunks[0].Digest
	p := s.chunkPath(strings.TrimPrefix(bad, "sha256:"))
	must(t, os.WriteFile(p, randBytes(100, ChunkSize), 0o600))
	dst := filepath.Join(t.TempDir(), "restored")
	must(t, os.Mkdir(dst, 0o755)) // an empty destination is allowed, and kept on failure
	checkCorrupt(t, "Restore", s.Restore(context.Background(), m.ID, dst, baseB), bad)
	if ents, err := os.ReadDir(dst); err != nil || len(ents) != 0 {
		t.Errorf("destination after a failed Restore: %d entries, %v; want empty", len(ents), err)
	}
	if _, err := os.Lstat(dst + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.tmp left behind: %v", dst, err)
	}
}

func checkCorrupt(t *testing.T, op string, err error, digest string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("%s = %v, want ErrCorrupt (a failed precondition)", op, err)
	}
	if code := errdefs.Code(err); code != "failed_precondition" {
		t.Errorf("%s: API code %q, want failed_precondition", op, code)
	}
	if got := errdefs.Details(err)["chunk"]; got != digest || !strings.Contains(errdefs.Message(err), digest) {
		t.Errorf("%s: error names chunk %v (%q), want %s", op, got, errdefs.Message(err), digest)
	}
}

func TestDeleteRefusedWhileDependedOn(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	m, err := s.Create(context.Background(), fullLayer(t, baseA), baseA, meta("sb_one"))
	must(t, err)
	deps := func(id string) []string { return []string{"sb_child", "snap_other"} }
	err = s.Delete(m.ID, deps)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "sb_child, snap_other") {
		t.Fatalf("Delete with dependents = %v, want a failed precondition naming them", err)
	}
	must(t, s.Verify(context.Background(), m.ID))
	must(t, s.Delete(m.ID, func(string) []string { return nil }))
	if _, err := s.Get(m.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want not found", err)
	}
	if err := s.Delete(m.ID, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Delete = %v, want not found", err)
	}
	if c := chunkFiles(t, s); len(c) != 0 {
		t.Errorf("%d chunks left after deleting the only snapshot", len(c))
	}
}

func TestDeleteCollectsOnlyUnusedChunks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	x, y, z := randBytes(1, ChunkSize), randBytes(2, ChunkSize), randBytes(3, ChunkSize)
	src := newLayer(t, baseA)
	put(t, src, "x", x, 0o644, baseA, 0)
	put(t, src, "y", y, 0o644, baseA, 0)
	a, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	must(t, os.Remove(filepath.Join(src, "x")))
	put(t, src, "z", z, 0o644, baseA, 0)
	b, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)

	must(t, s.Delete(a.ID, nil))
	want := []string{hexOf(b, "y"), hexOf(b, "z")}
	slices.Sort(want)
	if got := chunkFiles(t, s); !equal(got, want) {
		t.Errorf("chunks after deleting the first snapshot = %q, want y's and z's %q", got, want)
	}
	must(t, s.Verify(context.Background(), b.ID))
	must(t, s.Restore(context.Background(), b.ID, filepath.Join(t.TempDir(), "r"), baseB))
}

func hexOf(m *Manifest, path string) string {
	for _, e := range m.Entries {
		if e.Path == path {
			return strings.TrimPrefix(e.Chunks[0].Digest, "sha256:")
		}
	}
	return ""
}

// TestRestoreRefusesTamperedManifest edits a stored manifest and expects Restore to
// refuse it before writing anything, inside or outside the destination.
func TestRestoreRefusesTamperedManifest(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, c := range []struct {
		name   string
		tamper func(m *Manifest)
	}{
		{"dot-dot path", func(m *Manifest) { m.Entries[2].Path = "../escaped" }},
		{"dot-dot inside", func(m *Manifest) { m.Entries[2].Path = "d/../../escaped" }},
		{"absolute path", func(m *Manifest) { m.Entries[2].Path = "/escaped" }},
		{"through a symlink", func(m *Manifest) {
			m.Entries = append(m.Entries, Entry{Path: "link", Type: TypeSymlink, Target: "/"},
				Entry{Path: "link/escaped", Type: TypeFifo})
		}},
		{"hardlink out", func(m *Manifest) {
			m.Entries = append(m.Entries, Entry{Path: "h", Type: TypeHardlink, Target: "../../etc/passwd"})
		}},
		{"uid beyond range", func(m *Manifest) { m.Entries[2].UID = idRange }},
		{"file type in mode", func(m *Manifest) { m.Entries[2].Mode = unix.S_IFCHR | 0o644 }},
		{"unknown type", func(m *Manifest) { m.Entries[2].Type = "device" }},
		{"size mismatch", func(m *Manifest) { m.Entries[2].Size++ }},
		{"bad digest", func(m *Manifest) { m.Entries[2].Chunks[0].Digest = "sha256:../../x" }},
		{"duplicate", func(m *Manifest) { m.Entries = append(m.Entries, m.Entries[2]) }},
		{"no root", func(m *Manifest) { m.Entries = m.Entries[1:] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			src := newLayer(t, baseA)
			put(t, src, "d/f", []byte("content"), 0o644, baseA, 0)
			m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
			must(t, err)
			if m.Entries[2].Path != "d/f" {
				t.Fatalf("entries %v, want d/f third", m.Entries)
			}
			c.tamper(m)
			b, err := json.Marshal(m)
			must(t, err)
			must(t, os.WriteFile(s.manifestPath(m.ID), b, 0o600))

			parent := t.TempDir()
			dst := filepath.Join(parent, "a", "b", "restored")
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			err = s.Restore(context.Background(), m.ID, dst, baseB)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Restore = %v, want invalid argument", err)
			}
			var made []string
			filepath.WalkDir(parent, func(p string, _ os.DirEntry, err error) error {
				made = append(made, strings.TrimPrefix(p, parent))
				return err
			})
			if want := []string{"", "/a", "/a/b"}; !equal(made, want) {
				t.Errorf("Restore made %q, want nothing: %q", made, want)
			}
		})
	}
}

func TestRestoreRefusesNonEmptyDestination(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	m, err := s.Create(context.Background(), fullLayer(t, baseA), baseA, meta("sb_one"))
	must(t, err)
	dst := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dst, "keep"), nil, 0o600))
	if err := s.Restore(context.Background(), m.ID, dst, baseB); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Restore into a non-empty dir = %v, want failed precondition", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "keep")); err != nil {
		t.Errorf("Restore touched the destination: %v", err)
	}
}

func TestForeignIDsReadAsOverflow(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := newLayer(t, baseA)
	put(t, src, "foreign", []byte("x"), 0o644, 0, 5) // host uid 5: not the sandbox's
	must(t, unix.Mknod(filepath.Join(src, "wh"), unix.S_IFCHR, 0))
	m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	for _, c := range []struct {
		path string
		id   uint32
	}{{".", 0}, {"foreign", overflowID}, {"wh", 0}} {
		for _, e := range m.Entries {
			if e.Path == c.path && (e.UID != c.id || e.GID != c.id) {
				t.Errorf("%s recorded as %d:%d, want %d:%d", c.path, e.UID, e.GID, c.id, c.id)
			}
		}
	}
}

func TestBadIDs(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, id := range []string{"", "snap_", "../x", "snap_../../x", "snap_ABC", "sb_abc"} {
		if _, err := s.Get(id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want not found", id, err)
		}
		if err := s.Restore(context.Background(), id, filepath.Join(t.TempDir(), "r"), baseB); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Restore(%q) = %v, want not found", id, err)
		}
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, p := range []string{".", "a", "a/b", "../a", "a/../..", "/a", "a//b", "a/./b", "..", "a/", "a\x00b", "...", "..a"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		// Longer paths repeat what shorter ones reach, and take long to minimize.
		if len(p) > 128 {
			return
		}
		if checkPath(p) != nil {
			return
		}
		joined := filepath.Join("/dst", p)
		if joined != "/dst" && !strings.HasPrefix(joined, "/dst/") {
			t.Errorf("accepted %q, which joins to %q outside the root", p, joined)
		}
		if filepath.Join("/dst", p) != "/dst/"+p && p != "." {
			t.Errorf("accepted %q, which is not clean", p)
		}
		if strings.ContainsRune(p, 0) || strings.HasPrefix(p, "/") {
			t.Errorf("accepted %q", p)
		}
		for _, comp := range strings.Split(p, "/") {
			if comp == ".." || comp == "" || comp == "." && p != "." {
				t.Errorf("accepted %q with component %q", p, comp)
			}
		}
	})
}

// FuzzValidate feeds arbitrary manifests to validate: it must not panic, and what it
// accepts must have only paths checkPath accepts.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"id":"snap_a","entries":[{"path":".","type":"dir"},{"path":"a","type":"file","size":1,"chunks":[{"digest":"sha256:` + strings.Repeat("0", 64) + `","size":1}]}]}`))
	f.Add([]byte(`{"entries":[{"path":".","type":"dir"},{"path":"h","type":"hardlink","target":"../x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if json.Unmarshal(b, &m) != nil || validate(&m) != nil {
			return
		}
		for _, e := range m.Entries {
			if checkPath(e.Path) != nil || e.Type == TypeHardlink && checkPath(e.Target) != nil {
				t.Errorf("validate accepted entry %+v", e)
			}
		}
	})
}
