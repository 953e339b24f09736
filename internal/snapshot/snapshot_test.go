package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestRoundTripShiftsIDs(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := fullLayer(t, baseA)
	want := describe(t, src, baseA)

	m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if m.State != StateReady || m.Entries[0].Path != "." {
		t.Fatalf("Create: state %q, first entry %q; want ready, \".\"", m.State, m.Entries[0].Path)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if err := s.Restore(context.Background(), m.ID, dst, baseB); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if d := diffTrees(describe(t, dst, baseB), want); d != "" {
		t.Errorf("restored tree differs from the original:\n%s", d)
	}

	// Host ids moved from one range to the other, inside xattrs too.
	for _, c := range []struct {
		path     string
		uid, gid uint32
	}{
		{".", baseB, baseB},
		{"home/user/big.bin", baseB + 1000, baseB + 1000},
		{"home/user/abs", baseB + 1000, baseB + 1000},
		{"etc/removed", baseB, baseB},
	} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dst, c.path), &st))
		if st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", c.path, st.Uid, st.Gid, c.uid, c.gid)
		}
	}
	caps := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dst, "usr/local/bin/tool"), capsXattr, caps)
	must(t, err)
	if got, want := caps[:n], capsXattrV3(baseB); string(got) != string(want) {
		t.Errorf("file capability = %x, want root id shifted: %x", got, want)
	}
	acl := make([]byte, 128)
	n, err = unix.Getxattr(filepath.Join(dst, "home/user/shared"), aclAccess, acl)
	must(t, err)
	if got, want := acl[:n], aclXattr(baseB+1001); string(got) != string(want) {
		t.Errorf("ACL = %x, want user shifted: %x", got, want)
	}
	if _, err := os.Stat(dst + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.tmp left behind: %v", dst, err)
	}
}

func TestManifestRecordsEntries(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	m, err := s.Create(context.Background(), fullLayer(t, baseA), baseA, meta("sb_one"))
	must(t, err)
	byPath := map[string]Entry{}
	for _, e := range m.Entries {
		byPath[e.Path] = e
	}
	for _, c := range []struct {
		path   string
		typ    EntryType
		target string
	}{
		{"etc/removed", TypeWhiteout, ""},
		{"opt", TypeDir, ""},
		{"etc/big.link2", TypeFile, ""}, // the first name of the inode in walk order
		{"home/user/big.bin", TypeHardlink, "etc/big.link2"},
		{"home/user/big.link", TypeHardlink, "etc/big.link2"},
		{"home/user/abs", TypeSymlink, "/etc/hostname"},
		{"home/user/pipe", TypeFifo, ""},
	} {
		e := byPath[c.path]
		if e.Type != c.typ || e.Target != c.target {
			t.Errorf("%s: type %q target %q, want %q %q", c.path, e.Type, e.Target, c.typ, c.target)
		}
	}
	if got := string(byPath["opt"].Xattrs[opaqueXattr]); got != "y" {
		t.Errorf("opaque xattr of opt = %q, want y", got)
	}
	if e := byPath["usr/local/bin/tool"]; e.Mode != 0o4755 || e.UID != 0 {
		t.Errorf("setuid tool: mode %o uid %d, want 4755 0", e.Mode, e.UID)
	}
	if e := byPath["etc/big.link2"]; e.UID != 1000 || len(e.Chunks) != 3 || e.Size != 2*ChunkSize+12345 {
		t.Errorf("big.link2: uid %d, %d chunks, size %d; want 1000, 3, %d", e.UID, len(e.Chunks), e.Size, 2*ChunkSize+12345)
	}
	if want := int64(4 + 2*ChunkSize + 12345 + 10 + 3 + 5*ChunkSize + 14); m.LogicalSize != want {
		t.Errorf("LogicalSize = %d, want %d", m.LogicalSize, want)
	}
	got, err := s.Get(m.ID)
	must(t, err)
	if len(got.Entries) != len(m.Entries) || got.State != StateReady || got.SandboxID != "sb_one" {
		t.Errorf("Get = %d entries, state %q, sandbox %q; want %d, ready, sb_one", len(got.Entries), got.State, got.SandboxID, len(m.Entries))
	}
}

// TestRestoredLayerMountsAsOverlay checks that overlayfs reads the restored whiteout and
// opaque directory as it read the originals.
func TestRestoredLayerMountsAsOverlay(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	tmp := t.TempDir()
	lower := filepath.Join(tmp, "lower")
	for _, p := range []string{"gone", "keep", "d/x", "d/y"} {
		put(t, lower, p, []byte(p), 0o644, 0, 0)
	}
	up := newLayer(t, baseA)
	must(t, unix.Mknod(filepath.Join(up, "gone"), unix.S_IFCHR, 0))
	must(t, os.Mkdir(filepath.Join(up, "d"), 0o755))
	must(t, unix.Setxattr(filepath.Join(up, "d"), opaqueXattr, []byte("y"), 0))
	put(t, up, "d/z", []byte("z"), 0o644, baseA, 0)

	s := newStore(t)
	m, err := s.Create(context.Background(), up, baseA, meta("sb_one"))
	must(t, err)
	restored := filepath.Join(tmp, "restored")
	must(t, s.Restore(context.Background(), m.ID, restored, baseB))

	merged, work := filepath.Join(tmp, "merged"), filepath.Join(tmp, "work")
	must(t, os.Mkdir(merged, 0o755))
	must(t, os.Mkdir(work, 0o755))
	opts := "lowerdir=" + lower + ",upperdir=" + restored + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount overlayfs here: %v", err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	var got []string
	filepath.WalkDir(merged, func(p string, _ os.DirEntry, err error) error {
		rel, _ := filepath.Rel(merged, p)
		got = append(got, rel)
		return err
	})
	if want := []string{".", "d", "d/z", "keep"}; !equal(got, want) {
		t.Errorf("merged view = %q, want %q", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSecondSnapshotOfSameDataStoresNothing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := fullLayer(t, baseA)
	first, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	before := chunkFiles(t, s)
	second, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	if second.StoredSize != 0 {
		t.Errorf("second StoredSize = %d, want 0", second.StoredSize)
	}
	if after := chunkFiles(t, s); !equal(after, before) {
		t.Errorf("second snapshot changed the chunk files: %d before, %d after", len(before), len(after))
	}
	if first.StoredSize == 0 || first.StoredSize > first.LogicalSize {
		t.Errorf("first StoredSize = %d, want in (0, %d]", first.StoredSize, first.LogicalSize)
	}
	list, err := s.List("sb_one")
	must(t, err)
	if len(list) != 2 || list[0].ID != first.ID || list[1].ID != second.ID || list[0].Entries != nil {
		t.Errorf("List = %v, want the two snapshots oldest first without entries", list)
	}
}

func TestOneMiBChangeStoresAboutOneMiB(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := newLayer(t, baseA)
	for i := range 10 {
		put(t, src, filepath.Join("data", string(rune('a'+i))), randBytes(uint64(i), 10*ChunkSize), 0o644, baseA, 0)
	}
	first, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	if want := int64(100 * ChunkSize); first.StoredSize != want || first.LogicalSize != want {
		t.Fatalf("first: stored %d logical %d, want %d both", first.StoredSize, first.LogicalSize, want)
	}
	// 1 MiB rewritten in place at an unaligned offset touches two chunks.
	f, err := os.OpenFile(filepath.Join(src, "data/e"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(randBytes(99, ChunkSize), 3*ChunkSize+4096)
	must(t, err)
	must(t, f.Close())
	second, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	if second.StoredSize <= 0 || second.StoredSize > 2*ChunkSize {
		t.Errorf("second StoredSize = %d, want in (0, %d]", second.StoredSize, 2*ChunkSize)
	}
}

func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	shared := randBytes(7, 3*ChunkSize)
	var layers []string
	for i := range 2 {
		dir := newLayer(t, baseA)
		put(t, dir, "shared", shared, 0o644, baseA, 0)
		put(t, dir, "own", randBytes(uint64(10+i), 2*ChunkSize), 0o644, baseA, 0)
		layers = append(layers, dir, dir)
	}
	var wg sync.WaitGroup
	got := make([]*Manifest, len(layers))
	errs := make([]error, len(layers))
	for i, dir := range layers {
		wg.Go(func() { got[i], errs[i] = s.Create(context.Background(), dir, baseA, meta("sb_one")) })
	}
	wg.Wait()
	var stored int64
	for i, m := range got {
		if errs[i] != nil {
			t.Fatalf("Create %d: %v", i, errs[i])
		}
		stored += m.StoredSize
		dst := filepath.Join(t.TempDir(), "r")
		if err := s.Restore(context.Background(), m.ID, dst, baseB); err != nil {
			t.Errorf("Restore %d: %v", i, err)
		}
	}
	// Each distinct chunk is counted once, by whichever Create wrote it.
	if want := int64(3+2+2) * ChunkSize; stored != want {
		t.Errorf("StoredSize sums to %d, want %d", stored, want)
	}
	if n := len(chunkFiles(t, s)); n != 7 {
		t.Errorf("%d chunk files, want 7", n)
	}
}

func TestFailedCreateLeavesNoChunks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Create(ctx, fullLayer(t, baseA), baseA, meta("sb_one"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context = %v, want context.Canceled", err)
	}
	list, err := s.List("")
	must(t, err)
	if len(list) != 1 || list[0].State != StateFailed {
		t.Fatalf("List = %+v, want one failed snapshot", list)
	}
	if c := chunkFiles(t, s); len(c) != 0 {
		t.Errorf("chunks left by a failed Create: %q", c)
	}
	if err := s.Restore(context.Background(), list[0].ID, filepath.Join(t.TempDir(), "r"), baseB); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Restore of a failed snapshot = %v, want failed precondition", err)
	}
	must(t, s.Delete(list[0].ID, nil))
}

func TestCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		meta Manifest
		base uint32
	}{
		{"no sandbox", Manifest{Consistency: Stopped}, baseA},
		{"bad consistency", Manifest{SandboxID: "sb_x", Consistency: "live"}, baseA},
		{"base overflows", meta("sb_x"), ^uint32(0) - 10},
	} {
		if _, err := s.Create(context.Background(), dir, c.base, c.meta); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Create = %v, want invalid argument", c.name, err)
		}
	}
	if list, _ := s.List(""); len(list) != 0 {
		t.Errorf("refused Creates left %d manifests", len(list))
	}
}

func TestOpenRecoversFromCrash(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	m, err := s.Create(context.Background(), fullLayer(t, baseA), baseA, meta("sb_one"))
	must(t, err)
	kept := chunkFiles(t, s)
	// A Create that crashed: its manifest still "creating", an orphan chunk, a temp file.
	crashed := &Manifest{ID: newID(), SandboxID: "sb_one", State: StateCreating}
	must(t, s.writeManifest(crashed))
	orphan := "00" + kept[0][2:]
	must(t, os.WriteFile(s.chunkPath(orphan), []byte("x"), 0o600))
	must(t, os.WriteFile(filepath.Join(s.dir, "chunks", "00", ".tmp-1"), []byte("x"), 0o600))

	s2, err := Open(s.dir)
	must(t, err)
	got, err := s2.Get(crashed.ID)
	must(t, err)
	if got.State != StateFailed {
		t.Errorf("crashed snapshot is %q after Open, want failed", got.State)
	}
	if after := chunkFiles(t, s2); !equal(after, kept) {
		t.Errorf("chunks after Open = %d, want the %d the ready snapshot uses", len(after), len(kept))
	}
	must(t, s2.Verify(context.Background(), m.ID))
}

// TestOpenOnAFullDisk: a store whose disk is full still opens after a crash (the daemon
// must start to recover its sandboxes); the interrupted snapshot reads as failed, and
// the next Open with room records that.
func TestOpenOnAFullDisk(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	mnt := t.TempDir()
	must(t, unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	s, err := Open(filepath.Join(mnt, "snapshots"))
	must(t, err)
	crashed := &Manifest{ID: newID(), SandboxID: "sb_one", State: StateCreating}
	must(t, s.writeManifest(crashed))
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	must(t, err)
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	f.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("fill the disk: %v, want ENOSPC", err)
	}

	s2, err := Open(s.dir)
	if err != nil {
		t.Fatalf("Open on a full disk: %v, want it to open", err)
	}
	if got, err := s2.Get(crashed.ID); err != nil || got.State != StateFailed {
		t.Errorf("the interrupted snapshot on a full disk: %+v, %v; want it failed", got, err)
	}
	must(t, os.Remove(filler))
	_, err = Open(s.dir)
	must(t, err)
	if m, err := s.readManifest(crashed.ID); err != nil || m.State != StateFailed {
		t.Errorf("manifest after an Open with room: %+v, %v; want it recorded failed", m, err)
	}
}

func TestSparseFileStaysSparse(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := newLayer(t, baseA)
	p := put(t, src, "disk.img", nil, 0o644, baseA, 0)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 256*ChunkSize+7)
	must(t, err)
	must(t, f.Close())

	m, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	// One zero chunk and the tail: holes are stored densely but only once.
	if m.StoredSize > ChunkSize+10 || m.LogicalSize != 256*ChunkSize+10 {
		t.Errorf("stored %d logical %d, want ≤ %d and %d", m.StoredSize, m.LogicalSize, ChunkSize+10, 256*ChunkSize+10)
	}
	dst := filepath.Join(t.TempDir(), "r")
	must(t, s.Restore(context.Background(), m.ID, dst, baseB))
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(dst, "disk.img"), &st))
	if st.Size != 256*ChunkSize+10 || st.Blocks*512 > 4*ChunkSize {
		t.Errorf("restored size %d with %d bytes allocated, want %d and the holes kept", st.Size, st.Blocks*512, 256*ChunkSize+10)
	}
}

func TestOpenKeepsMalformedManifestDeletable(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	id := newID()
	must(t, os.WriteFile(s.manifestPath(id), []byte("{not json"), 0o600))
	s2, err := Open(s.dir)
	must(t, err)
	if m, err := s2.Get(id); err != nil || m.State != StateFailed {
		t.Fatalf("Get of a malformed manifest = %+v, %v; want failed", m, err)
	}
	must(t, s2.Delete(id, nil))
	if list, _ := s2.List(""); len(list) != 0 {
		t.Errorf("List after Delete = %v, want empty", list)
	}
}

// TestDeleteDuringCreate deletes the only snapshot that holds some chunks while a Create
// of the same data runs: the new snapshot must keep every chunk it reused.
func TestDeleteDuringCreate(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := newStore(t)
	src := newLayer(t, baseA)
	for i := range 8 {
		put(t, src, filepath.Join("f", string(rune('a'+i))), randBytes(uint64(i), ChunkSize+i), 0o644, baseA, 0)
	}
	prev, err := s.Create(context.Background(), src, baseA, meta("sb_one"))
	must(t, err)
	for range 5 {
		var next *Manifest
		var cerr, derr error
		var wg sync.WaitGroup
		wg.Go(func() { next, cerr = s.Create(context.Background(), src, baseA, meta("sb_one")) })
		wg.Go(func() { derr = s.Delete(prev.ID, nil) })
		wg.Wait()
		if cerr != nil || derr != nil {
			t.Fatalf("Create: %v, Delete: %v", cerr, derr)
		}
		if err := s.Verify(context.Background(), next.ID); err != nil {
			t.Fatalf("Verify after a concurrent Delete: %v", err)
		}
		prev = next
	}
}

func TestZeroChunk(t *testing.T) {
	sum := sha256.Sum256(make([]byte, ChunkSize))
	if got := hex.EncodeToString(sum[:]); got != zeroChunk {
		t.Fatalf("the digest of a chunk of zeros is %s, zeroChunk says %s", got, zeroChunk)
	}
}
