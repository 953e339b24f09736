package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/objstore"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
)

// A snapshot's memory image is checked against its manifest: as written it passes; a
// changed byte, a file added or one missing is corrupt; an image not on this node is
// an error that is not corruption (the fork keeps files only).
func TestSnapshotMemoryVerify(t *testing.T) {
	m := &Manager{cfg: Config{StateDir: t.TempDir()}}
	dir := m.memoryDir("snap_1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("checkpoint.img", "kernel state")
	write("pages.img", "pages")
	mi, err := memoryImageOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mi.Files) != 2 || mi.Files[0].Name != "checkpoint.img" || mi.Files[1].Size != 5 || len(mi.Files[1].SHA256) != 64 {
		t.Fatalf("memoryImageOf = %+v; want both files with their sizes and sha256", mi)
	}
	if mi.Bytes <= 0 || mi.Bytes != diskBytes(dir) {
		t.Errorf("memoryImageOf's Bytes = %d; want the %d bytes the files take on disk", mi.Bytes, diskBytes(dir))
	}
	man := &snapshot.Manifest{ID: "snap_1", Memory: mi}
	if err := m.verifySnapshotMemory(man); err != nil {
		t.Fatalf("the image as written: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func()
		undo   func()
	}{
		{"a changed byte", func() { write("pages.img", "pagez") }, func() { write("pages.img", "pages") }},
		{"a file added", func() { write("extra.img", "x") }, func() { os.Remove(filepath.Join(dir, "extra.img")) }},
		{"a file missing", func() { os.Remove(filepath.Join(dir, "pages.img")) }, func() { write("pages.img", "pages") }},
	} {
		c.change()
		if err := m.verifySnapshotMemory(man); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", c.name, err)
		}
		c.undo()
	}
	m.dropSnapshotMemory("snap_1")
	if err := m.verifySnapshotMemory(man); err == nil || errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("an image not on this node: %v; want an error that is not ErrCorrupt", err)
	}
	if err := m.verifySnapshotMemory(&snapshot.Manifest{ID: "snap_2"}); err != nil {
		t.Errorf("a files-only snapshot: %v; want nothing to check", err)
	}
}

// A restore gives a suspended sandbox the snapshot's memory only when nothing but its
// files differ: a sandbox with volumes attached (a memory snapshot never has any) keeps
// the snapshot's files only, as a fork given volumes does.
func TestRestoreWithVolumesKeepsNoSnapshotMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	m, _ := newManagerWith(t, cfg, saver{newFake(t)})
	dir := m.memoryDir("snap_1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	mi, err := memoryImageOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	man := &snapshot.Manifest{ID: "snap_1", Memory: mi}
	for _, c := range []struct {
		name    string
		volumes []store.SandboxVolume
		kept    bool
	}{
		{"no volumes", nil, true},
		{"a volume", []store.SandboxVolume{{VolumeID: "vol_1", Name: "data", Path: "/data"}}, false},
	} {
		sb := &store.Sandbox{ID: "sb_" + strings.ReplaceAll(c.name, " ", ""), Owner: local.Owner, State: Suspended, Volumes: c.volumes}
		m.restoreSnapshotMemory(sb, man)
		if MemoryOf(sb).Kept != c.kept {
			t.Errorf("%s: memory kept %v; want %v", c.name, MemoryOf(sb).Kept, c.kept)
		}
		if _, err := os.Stat(m.memoryDir(sb.ID)); (err == nil) != c.kept {
			t.Errorf("%s: the sandbox's memory image: %v; want it there %v", c.name, err, c.kept)
		}
	}
}

// At start, a snapshot's memory image stays only where a snapshot of this node names
// it: one whose snapshot is gone, keeps files only, or is in the object store alone
// (another node's, or planted there) is removed, and the bucket is not asked.
func TestRecoverKeepsOnlyNamedSnapshotMemory(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	m, _ := newManagerWith(t, cfg, newFake(t))
	snaps, err := snapshot.Open(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.OpenDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	snaps.UseObjects(objs, 0)
	m.SetSnapshots(snaps)
	mi := &snapshot.MemoryImage{Bytes: 1, Files: []snapshot.MemoryFile{{Name: "pages.img", Size: 1, SHA256: "00"}}}
	withMemory, err := snaps.Create(ctx, t.TempDir(), 0, snapshot.Manifest{SandboxID: "sb_1", Consistency: snapshot.CrashConsistent, Memory: mi})
	if err != nil {
		t.Fatal(err)
	}
	filesOnly, err := snaps.Create(ctx, t.TempDir(), 0, snapshot.Manifest{SandboxID: "sb_1", Consistency: snapshot.CrashConsistent})
	if err != nil {
		t.Fatal(err)
	}
	inBucket := snapshot.NewID()
	plant(t, objs, withMemory.ID, inBucket, "sb_1")
	gone := snapshot.NewID()
	for _, id := range []string{withMemory.ID, filesOnly.ID, inBucket, gone} {
		if err := os.MkdirAll(m.memoryDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m.recoverSnapshotMemory()
	for id, kept := range map[string]bool{withMemory.ID: true, filesOnly.ID: false, inBucket: false, gone: false} {
		if _, err := os.Stat(m.memoryDir(id)); (err == nil) != kept {
			t.Errorf("memory image of %s after recovery: %v; want it there %v", id, err, kept)
		}
	}
	if l, _ := snaps.List(""); len(l) != 2 {
		t.Errorf("recovery read %d snapshots into this node; want its own 2 (the bucket not asked)", len(l))
	}
}

// A memory image's file names stay inside the image: a manifest naming one outside is
// refused, and nothing is made outside the sandbox's own image directory.
func TestLinkSnapshotMemoryStaysInside(t *testing.T) {
	m := &Manager{cfg: Config{StateDir: t.TempDir()}}
	if err := os.MkdirAll(m.memoryDir("snap_1"), 0o700); err != nil {
		t.Fatal(err)
	}
	man := &snapshot.Manifest{ID: "snap_1", Memory: &snapshot.MemoryImage{Files: []snapshot.MemoryFile{{Name: "../../outside/pages.img"}}}}
	sb := &store.Sandbox{ID: "sb_1"}
	if err := m.linkSnapshotMemory(sb, man); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("linkSnapshotMemory of a name outside the image: %v; want ErrCorrupt", err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.StateDir, "outside")); err == nil {
		t.Error("a directory was made outside the memory images")
	}
	if _, err := os.Stat(m.memoryDir(sb.ID)); err == nil || MemoryOf(sb).Kept {
		t.Errorf("a refused link left the sandbox's image (kept %v)", MemoryOf(sb).Kept)
	}
}
