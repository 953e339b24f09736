package volume

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/idmap"
	"github.com/airlockhq/airlock/internal/loopdev"
)

func requireHost(t *testing.T) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, tool := range []string{"mkfs.ext4", "resize2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = tool
		}
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("volume tests need %s", missing)
		}
		t.Skipf("volume tests need %s", missing)
	}
}

// newHost returns a Host under a temporary directory whose every volume is closed and
// removed at the end, even when the test fails, and checks no loop device is left.
func newHost(t *testing.T) *Host {
	t.Helper()
	requireHost(t)
	h, err := New(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, sb := range h.Bound() {
			h.Unbind(sb)
		}
		for _, id := range h.IDs() {
			img := h.image(id)
			if err := h.Remove(id); err != nil {
				t.Errorf("remove volume %s: %v", id, err)
			}
			if dev, _ := loopdev.Of(img); dev != "" {
				t.Errorf("loop device %s still backs %s", dev, img)
			}
		}
	})
	return h
}

// made makes volume id of size bytes on h, and gives its key.
func made(t *testing.T, h *Host, id string, size int64) []byte {
	t.Helper()
	key := newKey()
	if err := h.Make(context.Background(), id, size, key); err != nil {
		t.Fatalf("Make: %v", err)
	}
	return key
}

func newKey() []byte {
	k := make([]byte, KeySize)
	rand.Read(k)
	return k
}

// TestVolumeCapacityGrowEncryption: a volume is a hard cap (writing past it is ENOSPC),
// grows while mounted (the mounted filesystem sees the new size), keeps its data across
// close and open, and what was written in it is nowhere in its image in the clear, file
// names included.
func TestVolumeCapacityGrowEncryption(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	key := newKey()
	const size = 32 << 20
	if err := h.Make(ctx, "vol_a", size, key); err != nil {
		t.Fatalf("Make: %v", err)
	}
	if err := h.Open(ctx, "vol_a", size, key); err != nil {
		t.Fatalf("Open: %v", err)
	}
	data := filepath.Join(h.mnt("vol_a"), dataName)
	pattern := bytes.Repeat([]byte("AIRLOCK-PLAINTEXT-MARKER-0123456789:"), 4096)
	name := "secret-file-name-marker"
	if err := os.WriteFile(filepath.Join(data, name), pattern, 0o644); err != nil {
		t.Fatal(err)
	}

	// Fill it: the write ends in ENOSPC, short of the capacity.
	f, err := os.Create(filepath.Join(data, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	var wrote int64
	for wrote < 2*size {
		n, err := f.Write(chunk)
		wrote += int64(n)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the volume: %v; want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if wrote >= size {
		t.Fatalf("wrote %d bytes into a volume of %d", wrote, size)
	}
	var before unix.Statfs_t
	unix.Statfs(data, &before)

	// Grow it while a sandbox's mount uses it: in place where the node may resize a
	// mounted filesystem, else at its next mount once nobody uses it.
	if _, err := h.Bind("sb_test", "vol_a", 200000, nil, false); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	err = h.Grow(ctx, "vol_a", 2*size, key)
	if errors.Is(err, ErrGrowsOffline) {
		t.Logf("grown offline: %v", err)
		if _, err := h.Unbind("sb_test"); err != nil {
			t.Fatal(err)
		}
		err = h.Grow(ctx, "vol_a", 2*size, key)
		if err == nil {
			err = h.Open(ctx, "vol_a", 2*size, key)
		}
	}
	if err != nil {
		t.Fatalf("Grow: %v", err)
	}
	var after unix.Statfs_t
	unix.Statfs(data, &after)
	if after.Blocks*uint64(after.Bsize) <= before.Blocks*uint64(before.Bsize)+size/2 {
		t.Fatalf("after a grow from %d to %d bytes the mounted volume has %d bytes (had %d)", size, 2*size,
			after.Blocks*uint64(after.Bsize), before.Blocks*uint64(before.Bsize))
	}
	if got, _ := h.Size("vol_a"); got != 2*size {
		t.Fatalf("Size after the grow = %d; want %d", got, 2*size)
	}
	if err := os.WriteFile(filepath.Join(data, "more"), chunk, 0o644); err != nil {
		t.Fatalf("writing into the grown volume: %v", err)
	}
	h.Unbind("sb_test")

	// Closed, nothing of the pattern or the name is in the image.
	if err := h.Close("vol_a"); err != nil {
		t.Fatal(err)
	}
	if err := loopdev.WaitReleased(h.image("vol_a")); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(h.image("vol_a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, marker := range [][]byte{pattern[:36], []byte(name)} {
		if bytes.Contains(img, marker) {
			t.Fatalf("the image holds %q in the clear", marker)
		}
	}

	// Opened again with its key, the file reads back.
	if err := h.Open(ctx, "vol_a", 2*size, key); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(data, name))
	if err != nil || !bytes.Equal(got, pattern) {
		t.Fatalf("after a reopen the file reads %d bytes, %v; want the pattern", len(got), err)
	}
}

// TestVolumeCopyChecksum: a copy of a volume (open meanwhile) opens with the source's
// key and holds its files; its checksum verifies, and fails once a byte of it changes.
func TestVolumeCopyChecksum(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	key := made(t, h, "vol_a", 16<<20)
	if err := h.Open(ctx, "vol_a", 16<<20, key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.mnt("vol_a"), dataName, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := h.Copy(ctx, "vol_a", "vsnap_b", "")
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if again, err := h.Copy(ctx, "vsnap_b", "vol_c", sum); err != nil || again != sum {
		t.Fatalf("a copy of an intact copy: %s, %v; want %s", again, err, sum)
	}
	if err := h.Open(ctx, "vsnap_b", 16<<20, key); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(h.mnt("vsnap_b"), dataName, "f")); err != nil || string(got) != "kept" {
		t.Fatalf("the copy's file = %q, %v; want kept", got, err)
	}
	if err := h.Close("vsnap_b"); err != nil {
		t.Fatal(err)
	}
	loopdev.WaitReleased(h.image("vsnap_b"))
	f, err := os.OpenFile(h.image("vsnap_b"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 1024+0x60) // a superblock byte
	f.Close()
	if _, err := h.Copy(ctx, "vsnap_b", "vol_d", sum); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a copy of a changed copy: %v; want it refused as damaged", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "vol_d", imageName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused copy left its image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "vol_d", imageName+".tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused copy left its temporary image: %v", err)
	}
}

// TestVolumeBindThroughUserns: a sandbox's mount of a volume made through a user
// namespace of the sandbox's range (its runtime's) shows the volume's ids as the
// sandbox's own and stores the sandbox's ids as the volume's, read-only where asked; a
// namespace of another range is refused, and nothing is left mounted.
func TestVolumeBindThroughUserns(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	key := made(t, h, "vol_n", 16<<20)
	if err := h.Open(ctx, "vol_n", 16<<20, key); err != nil {
		t.Fatal(err)
	}
	const base = 300000
	ns, err := idmap.Namespace(idmap.Mapping{ToUID: base, ToGID: base, Size: IDRange})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	onDisk := filepath.Join(h.mnt("vol_n"), dataName, "f")
	if err := os.WriteFile(onDisk, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rw, err := h.Bind("sb_rw", "vol_n", base, ns, false)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	// The sandbox's uid 1000 is host uid base+1000; on the volume it is 1000.
	if err := os.Chown(filepath.Join(rw, "f"), base+1000, base+1001); err != nil {
		t.Fatalf("chown through the mount to the sandbox's 1000: %v", err)
	}
	if uid, gid := ownerOf(t, onDisk); uid != 1000 || gid != 1001 {
		t.Errorf("on the volume the file is %d:%d; want 1000:1001", uid, gid)
	}
	if uid, gid := ownerOf(t, filepath.Join(rw, "f")); uid != base+1000 || gid != base+1001 {
		t.Errorf("through the mount the file is %d:%d; want %d:%d", uid, gid, base+1000, base+1001)
	}
	if err := os.Chown(filepath.Join(rw, "f"), base-1, base-1); !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOVERFLOW) {
		t.Errorf("chown through the mount to an id below the range: %v; want refused", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rw, &st); err != nil || st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Errorf("mount flags %#x (%v); want nosuid and nodev", st.Flags, err)
	}

	ro, err := h.Bind("sb_ro", "vol_n", base, ns, true)
	if err != nil {
		t.Fatalf("Bind read-only: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ro, "g"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("a write through the read-only mount: %v; want EROFS", err)
	}

	// A namespace of another sandbox's range.
	_, err = h.Bind("sb_other", "vol_n", base+IDRange, ns, false)
	if err == nil || !strings.Contains(err.Error(), "does not map as asked") {
		t.Errorf("Bind through another range's namespace: %v; want refused", err)
	}
	if _, err := os.Lstat(filepath.Join(h.bindDir("sb_other"), "vol_n")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a refused bind its mount point: %v; want gone", err)
	}
}

func ownerOf(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// TestVolumeLoopRecord: a new volume is recorded as held by no loop device, its mount
// records the device it took (and drops the record of older versions), and no record
// is left of the image's temporary name.
func TestVolumeLoopRecord(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	key := made(t, h, "vol_r", 16<<20)
	img := h.image("vol_r")
	if b, err := os.ReadFile(loopdev.Record(img)); err != nil || len(b) != 0 {
		t.Fatalf("record of a new volume = %q, %v; want empty", b, err)
	}
	if _, err := os.Stat(loopdev.Record(img + ".tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("record of the temporary image left: %v", err)
	}
	old := filepath.Join(h.dir, "vol_r", oldLoopName)
	if err := os.WriteFile(old, []byte("loop0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Open(ctx, "vol_r", 16<<20, key); err != nil {
		t.Fatal(err)
	}
	dev, err := loopdev.Of(img)
	if err != nil || dev == "" {
		t.Fatalf("Of(%s) = %q, %v; want its device", img, dev, err)
	}
	if b, _ := os.ReadFile(loopdev.Record(img)); string(b) != dev {
		t.Fatalf("record of the mounted volume = %q; want %q", b, dev)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the older record is left: %v", err)
	}
}
