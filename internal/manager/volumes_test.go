package manager

import (
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

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/volume"
)

// A suspended sandbox's memory image holds its processes' open files and cached pages
// of the volumes it had: an attach or a detach drops the image (its resume starts
// afresh), and says so; an attach refused changes nothing, the image included.
func TestVolumeAttachDetachDropsKeptMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	m, st := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	setVolumes(t, m, st, t.TempDir())
	now := m.now()
	if err := st.CreateVolume(ctx, &store.Volume{ID: "vol_1", Kind: VolumeKindVolume, Owner: local.Owner, Name: "data",
		Node: m.cfg.NodeName, Size: MinVolumeSize, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Terminate(ctx, local, sb.ID)
	if _, _, err := m.Suspend(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	// As a runsc suspend leaves it: an image on disk, and the record naming it.
	keep := func() {
		t.Helper()
		cur, err := st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		setMemory(cur, &MemoryState{Kept: true, Generation: cur.Generation})
		if err := st.UpdateSandbox(ctx, cur); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(m.memoryDir(sb.ID), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.memoryDir(sb.ID), "pages.img"), []byte("pages"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() bool {
		t.Helper()
		cur, err := st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, serr := os.Stat(m.memoryDir(sb.ID))
		if MemoryOf(cur).Kept != (serr == nil) {
			t.Errorf("the record says kept %v, the image on disk: %v", MemoryOf(cur).Kept, serr)
		}
		return MemoryOf(cur).Kept
	}
	keep()
	if _, err := m.AttachVolume(ctx, local.Owner, "data", sb.ID, VolumeMountRequest{Path: "/proc/x"}); err == nil {
		t.Fatal("a volume over /proc was attached")
	}
	if !kept() {
		t.Error("a refused attach dropped the sandbox's memory image")
	}
	if _, err := m.AttachVolume(ctx, local.Owner, "data", sb.ID, VolumeMountRequest{Path: "/data"}); err != nil {
		t.Fatal(err)
	}
	if kept() {
		t.Error("after an attach the sandbox's memory image is still kept: its resume would restore processes over other mounts than they had")
	}
	keep()
	if _, err := m.DetachVolume(ctx, local.Owner, "data", sb.ID); err != nil {
		t.Fatal(err)
	}
	if kept() {
		t.Error("after a detach the sandbox's memory image is still kept: its restored processes would hold files of a volume another sandbox may now write")
	}
	if _, err := os.Stat(m.memoryDir(sb.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the memory image is still on disk: %v", err)
	}
}

// flakyStore fails every read of one sandbox's record, as a store that cannot answer
// for a moment does.
type flakyStore struct {
	store.Store
	id string
}

func (f flakyStore) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	if id == f.id {
		return nil, errors.New("database is locked")
	}
	return f.Store.GetSandbox(ctx, id)
}

// Recovery removes the volume mounts of sandboxes that do not run, and only those: a
// sandbox whose record cannot be read keeps them (its volume, key and all, may be in
// use by its running container).
func TestReconcileVolumesKeepsMountsOfSandboxesItCannotRead(t *testing.T) {
	m, _, st := newTestManager(t)
	dir := t.TempDir()
	vols, err := volume.New(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.SetVolumes(vols)
	for _, sb := range []string{"sb_unreadable", "sb_gone"} {
		if err := os.MkdirAll(filepath.Join(dir, "binds", sb, "vol_1"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m.store = flakyStore{Store: st, id: "sb_unreadable"}
	m.reconcileVolumes(context.Background(), map[string]bool{})
	if _, err := os.Stat(filepath.Join(dir, "binds", "sb_unreadable", "vol_1")); err != nil {
		t.Errorf("the volume mount of a sandbox whose record could not be read was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "binds", "sb_gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the volume mounts of a sandbox without a record are still there: %v", err)
	}
}

// Recovery drops an attachment a crash left and finishes a recorded grow of the same
// volume: the grow is recorded done over the record as the drop left it, not the one
// read before it.
func TestReconcileVolumesFinishesGrowAfterDroppingAttachment(t *testing.T) {
	m, st, svc, vols, _ := withRealVolumes(t)
	ctx := context.Background()
	key := make([]byte, volume.KeySize)
	rand.Read(key)
	kid, sealed, err := svc.SealKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := vols.Make(ctx, "vol_1", MinVolumeSize, key); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vols.Remove("vol_1"); err != nil {
			t.Errorf("remove the volume: %v", err)
		}
	})
	now := m.now()
	if err := st.CreateVolume(ctx, &store.Volume{ID: "vol_1", Kind: VolumeKindVolume, Owner: local.Owner, Name: "data",
		Node: m.cfg.NodeName, Size: MinVolumeSize, GrowTo: 2 * MinVolumeSize, KeyID: kid, Key: sealed,
		Attachments: []store.VolumeAttachment{{SandboxID: "sb_gone", Path: "/data"}}, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	m.reconcileVolumes(ctx, map[string]bool{})
	v, err := st.GetVolume(ctx, "vol_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Attachments) != 0 {
		t.Errorf("the attachment of a sandbox that is gone is still recorded: %+v", v.Attachments)
	}
	if v.Size != 2*MinVolumeSize || v.GrowTo != 0 {
		t.Errorf("after recovery the volume is recorded at size %d, grow to %d; want %d, 0", v.Size, v.GrowTo, 2*MinVolumeSize)
	}
}

// withRealVolumes returns a test manager with real volumes under the directory it
// returns, every one removed at the end; it skips where the host cannot make them.
func withRealVolumes(t *testing.T) (*Manager, store.Store, *secret.Service, *volume.Host, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("volumes need root")
	}
	for _, tool := range []string{"mkfs.ext4", "resize2fs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("volumes need %s", tool)
		}
	}
	m, _, st := newTestManager(t)
	dir := t.TempDir()
	vols := setVolumes(t, m, st, dir)
	t.Cleanup(func() {
		for _, id := range vols.IDs() {
			if err := vols.Remove(id); err != nil {
				t.Errorf("remove volume %s: %v", id, err)
			}
		}
	})
	return m, st, m.secrets, vols, dir
}

// setVolumes gives m a secret service and a volume host in dir.
func setVolumes(t *testing.T, m *Manager, st store.Store, dir string) *volume.Host {
	t.Helper()
	svc, err := secret.Open(st, filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	m.SetSecrets(svc, nil)
	vols, err := volume.New(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.SetVolumes(vols)
	return vols
}

// A volume made from a snapshot whose image no longer matches its checksum is refused
// as a precondition, and leaves no volume behind.
func TestCreateVolumeFromDamagedSnapshotRefused(t *testing.T) {
	m, _, _, vols, dir := withRealVolumes(t)
	ctx := context.Background()
	if _, err := m.CreateVolume(ctx, local.Owner, "data", MinVolumeSize, ""); err != nil {
		t.Fatal(err)
	}
	snap, err := m.SnapshotVolume(ctx, local.Owner, "data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateVolume(ctx, local.Owner, "intact", 0, snap.ID); err != nil {
		t.Fatalf("a volume from an intact snapshot: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, snap.ID, "volume.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 1024+0x60) // a superblock byte
	f.Close()
	before := len(vols.IDs())
	if _, err := m.CreateVolume(ctx, local.Owner, "copy", 0, snap.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a volume from a damaged snapshot: %v; want failed precondition", err)
	}
	if _, err := m.GetVolume(ctx, local.Owner, "copy"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused volume is recorded: %v", err)
	}
	if n := len(vols.IDs()); n != before {
		t.Errorf("a refused volume left files: %d volumes on disk, %d before", n, before)
	}
}

// A snapshot of a volume whose grow the host finished but its record does not show yet
// is as large as its filesystem: its size, and the owner's quota, count what it holds.
func TestSnapshotVolumeSizeIsItsFilesystems(t *testing.T) {
	m, st, svc, vols, _ := withRealVolumes(t)
	ctx := context.Background()
	v, err := m.CreateVolume(ctx, local.Owner, "data", MinVolumeSize, "")
	if err != nil {
		t.Fatal(err)
	}
	key, err := svc.OpenKey(v.KeyID, v.Key)
	if err != nil {
		t.Fatal(err)
	}
	// As a resize leaves it when the daemon stops after the host grew it.
	if err := vols.Grow(ctx, v.ID, 2*MinVolumeSize, key); err != nil {
		t.Fatal(err)
	}
	if cur, _ := st.GetVolume(ctx, v.ID); cur.Size != MinVolumeSize {
		t.Fatalf("the record's size moved: %d", cur.Size)
	}
	snap, err := m.SnapshotVolume(ctx, local.Owner, "data")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Size != 2*MinVolumeSize {
		t.Errorf("the snapshot's size is %d; its filesystem holds %d", snap.Size, 2*MinVolumeSize)
	}
}

// A volume's files are on its own node: another node sharing the store refuses to
// copy them (a snapshot of a volume, a volume from a snapshot), saying where they are,
// and changes nothing.
func TestVolumeCopyOnAnotherNodeRefused(t *testing.T) {
	m, _, st := newTestManager(t)
	ctx := context.Background()
	vols := setVolumes(t, m, st, t.TempDir())
	now := m.now()
	for _, v := range []*store.Volume{
		{ID: "vol_1", Kind: VolumeKindVolume, Owner: local.Owner, Name: "data", Node: "other", Size: MinVolumeSize, CreatedAt: now, UpdatedAt: now},
		{ID: "vsnap_1", Kind: VolumeKindSnapshot, Owner: local.Owner, Name: "vsnap_1", Node: "other", Size: MinVolumeSize, CreatedAt: now, UpdatedAt: now},
	} {
		if err := st.CreateVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.SnapshotVolume(ctx, local.Owner, "data"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node other") {
		t.Errorf("a snapshot of a volume on another node: %v; want failed precondition naming node other", err)
	}
	if _, err := m.CreateVolume(ctx, local.Owner, "copy", 0, "vsnap_1"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node other") {
		t.Errorf("a volume from a snapshot on another node: %v; want failed precondition naming node other", err)
	}
	all, err := st.ListVolumes(ctx, local.Owner, "")
	if err != nil || len(all) != 2 || all[0].Version != 1 || all[1].Version != 1 {
		t.Errorf("after the refused calls the records are %v, %v; want both unchanged", all, err)
	}
	if ids := vols.IDs(); len(ids) != 0 {
		t.Errorf("the refused calls left files: %v", ids)
	}
}
