package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/loopdev"
	"github.com/airlockhq/airlock/internal/testenv"
)

// volumeMarker is written inside volumes and looked for, in the clear, on the host.
const volumeMarker = "AIRLOCK-VOLUME-PLAINTEXT-MARKER"

// releaseVolumes is a cleanup that runs after the node's own (register it first): any
// mount left under the node's volumes, and the loop devices of their images, are
// removed, so that a failing test leaks nothing. A passing test leaves none (the node's
// own cleanup checks).
func releaseVolumes(t *testing.T, dir func() string) {
	t.Cleanup(func() {
		d := dir()
		if d == "" {
			return
		}
		mounts := testenv.MountsUnder(d)
		slices.Reverse(mounts)
		for _, m := range mounts {
			unix.Unmount(m, unix.MNT_DETACH)
		}
		imgs, _ := filepath.Glob(filepath.Join(d, "*", "volume.img*"))
		for _, img := range imgs {
			if dev, _ := loopdev.Of(img); dev != "" {
				exec.Command("losetup", "-d", "/dev/"+dev).Run()
			}
		}
	})
}

// checkVolumeOwners: what sandbox sb (holding volume vol at /data) gives its ids
// 1234:2345 is owned by those ids on the volume, and by them in the sandbox's own range
// (its uid_map's base on) through the sandbox's mount on the host, nosuid and nodev.
func checkVolumeOwners(t *testing.T, n *testenv.Node, volDir, sb, vol string) {
	t.Helper()
	out := mustRun(t, n, sb, "touch /data/owned && chown 1234:2345 /data/owned && cat /proc/self/uid_map /proc/self/gid_map")
	f := strings.Fields(out)
	if len(f) != 6 || f[0] != "0" || f[2] != "65536" || f[3] != "0" || f[4] != f[1] || f[5] != "65536" {
		t.Fatalf("the sandbox's id maps: %q; want one range of 65536 ids from one base", out)
	}
	base, _ := strconv.ParseUint(f[1], 10, 32)
	s, err := n.Client.Get(background, sb)
	if err != nil {
		t.Fatal(err)
	}
	v, err := n.Client.GetVolume(background, vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		where, path string
		uid, gid    uint64
	}{
		{"on the volume", filepath.Join(volDir, v.ID, "mnt", "data", "owned"), 1234, 2345},
		{"through the sandbox's mount", filepath.Join(volDir, "binds", s.ID, v.ID, "owned"), base + 1234, base + 2345},
	} {
		var st unix.Stat_t
		if err := unix.Lstat(c.path, &st); err != nil {
			t.Errorf("%s: %v", c.where, err)
		} else if uint64(st.Uid) != c.uid || uint64(st.Gid) != c.gid {
			t.Errorf("%s a file the sandbox gave 1234:2345 is %d:%d; want %d:%d", c.where, st.Uid, st.Gid, c.uid, c.gid)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(volDir, "binds", s.ID, v.ID), &st); err != nil || st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Errorf("the sandbox's mount of the volume: flags %#x (%v); want nosuid and nodev", st.Flags, err)
	}
	mustRun(t, n, sb, "rm /data/owned")
}

func dfTotal(t *testing.T, n *testenv.Node, sb, path string) int64 {
	t.Helper()
	out := mustRun(t, n, sb, "df -B1 --output=size "+path+" | tail -1")
	v, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("df in %s: %q", sb, out)
	}
	return v
}

// TestVolumes: a volume outlives its sandboxes and is theirs alone to see: another owner
// cannot name it; a full volume is ENOSPC inside and nothing else; it grows (never
// shrinks) and the sandbox sees the new size; one writer at a time and any number of
// readers, who see what it writes; attach and detach need a suspended sandbox and
// removal needs no attachment; suspend and resume keep it, a fork does not get it; a
// volume snapshot makes a new volume with the same files; and the host's copy of a
// volume holds nothing written in it in the clear.
func TestVolumes(t *testing.T) {
	var volDir string
	releaseVolumes(t, func() string { return volDir })
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"bob"}})
	volDir = filepath.Join(n.Dir, "volumes")
	alice, bob := n.Client, n.As(t, "bob") // alice is the local owner
	const size = 32 << 20

	_, err := alice.CreateVolume(background, api.CreateVolumeRequest{Name: "data", Size: 1 << 20})
	wantAPIError(t, "a 1 MiB volume", err, 400, "invalid_argument")
	vol, err := alice.CreateVolume(background, api.CreateVolumeRequest{Name: "data", Size: size})
	if err != nil {
		t.Fatal(err)
	}

	// Another owner can neither see nor touch it, nor attach it.
	_, err = bob.GetVolume(background, "data")
	wantAPIError(t, "another owner gets the volume", err, 404, "not_found")
	if list, err := bob.Volumes(background, ""); err != nil || len(list) != 0 {
		t.Errorf("another owner's volume list: %v, %v; want empty", list, err)
	}
	wantAPIError(t, "another owner removes the volume", bob.DeleteVolume(background, "data"), 404, "not_found")
	_, err = bob.Create(background, api.CreateSandboxRequest{Name: "thief", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	wantAPIError(t, "another owner attaches the volume", err, 404, "not_found")

	// A writer and a reader.
	w, err := alice.Create(background, api.CreateSandboxRequest{Name: "w", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Sandbox.Volumes; len(got) != 1 || got[0].Name != "data" || got[0].Path != "/data" || got[0].ReadOnly {
		t.Errorf("the writer's volumes = %+v; want data at /data read-write", got)
	}
	if _, err := alice.Create(background, api.CreateSandboxRequest{Name: "r", Volumes: []api.VolumeMount{{Name: "data", Path: "/mnt/data", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.Create(background, api.CreateSandboxRequest{Name: "w2", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if e := wantAPIError(t, "a second writer", err, 409, "failed_precondition"); e != nil && !strings.Contains(e.Message, `"w"`) {
		t.Errorf("the second writer's refusal does not name the holder: %q", e.Message)
	}
	mustRun(t, n, "w", "yes "+volumeMarker+" | head -c 1048576 > /data/f && sync")
	checkVolumeOwners(t, n, volDir, "w", "data")
	if out := mustRun(t, n, "r", "head -c 31 /mnt/data/f"); out != volumeMarker {
		t.Errorf("the reader sees %q; want the writer's file", out)
	}
	if res := mustFail(t, n, "r", "echo x > /mnt/data/g"); !strings.Contains(res.Stderr, "Read-only file system") {
		t.Errorf("a write by the reader: %q; want a read-only file system", res.Stderr)
	}

	// Capacity: full is ENOSPC in the writer; the reader and the writer go on.
	if total := dfTotal(t, n, "w", "/data"); total > size || total < size*3/4 {
		t.Errorf("df in the sandbox says %d bytes; want about %d", total, size)
	}
	res := run(t, n, "w", "dd if=/dev/zero of=/data/big bs=1M count=64 2>&1; echo rc=$?")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") {
		t.Errorf("writing 64 MiB into a 32 MiB volume: %q; want ENOSPC", res.Stdout)
	}
	mustRun(t, n, "w", "rm /data/big && echo ok > /root/own")
	mustRun(t, n, "r", "true")

	// Resize: smaller is refused naming the size; larger grows, seen inside.
	_, err = alice.ResizeVolume(background, "data", 16<<20)
	if e := wantAPIError(t, "shrinking", err, 400, "invalid_argument"); e != nil && !strings.Contains(e.Message, strconv.Itoa(size)) {
		t.Errorf("the shrink's refusal does not say the size: %q", e.Message)
	}
	grown, err := alice.ResizeVolume(background, "data", 2*size)
	if err != nil {
		t.Fatal(err)
	}
	if grown.GrowTo != 0 { // the node cannot grow a mounted filesystem: it grows at the next mount
		t.Logf("grows at its next mount: %+v", grown)
		for _, sb := range []string{"w", "r"} {
			if _, err := alice.Suspend(background, sb); err != nil {
				t.Fatal(err)
			}
		}
	}
	if total := dfTotal(t, n, "w", "/data"); total < size*3/2 {
		t.Errorf("after a grow to %d bytes df in the sandbox says %d", 2*size, total)
	}
	if v, _ := alice.GetVolume(background, "data"); v == nil || v.Size != 2*size || v.GrowTo != 0 {
		t.Errorf("after the grow the volume is %+v; want size %d", v, 2*size)
	}

	// Attach and detach need a suspended sandbox; removal needs no attachment.
	mustRun(t, n, "w", "true") // running again
	_, err = alice.DetachVolume(background, "data", "w")
	wantAPIError(t, "a detach from a running sandbox", err, 409, "failed_precondition")
	err = alice.DeleteVolume(background, "data")
	if e := wantAPIError(t, "removing an attached volume", err, 409, "failed_precondition"); e != nil && !strings.Contains(e.Message, `"w"`) {
		t.Errorf("the refusal does not name the sandboxes: %q", e.Message)
	}

	// Suspend and resume keep it; a fork does not get it.
	if _, err := alice.Suspend(background, "w"); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, "w", "head -c 31 /data/f"); out != volumeMarker {
		t.Errorf("after suspend and resume /data/f starts %q", out)
	}
	// A restore replaces the upper layer and keeps the volume.
	snapResp, err := alice.Snapshot(background, "w", nil)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, n, "w", "echo after > /data/after")
	if _, err := alice.Suspend(background, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Restore(background, "w", api.RestoreRequest{Snapshot: snapResp.Snapshot.ID, NoSafetySnapshot: true}); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, "w", "cat /data/after"); out != "after\n" {
		t.Errorf("after a restore the volume holds %q; want what was written after the snapshot (volumes are not in snapshots)", out)
	}
	if _, err := alice.Fork(background, "w", api.ForkRequest{Name: "forked"}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := alice.Get(background, "forked"); sb == nil || len(sb.Volumes) != 0 {
		t.Errorf("the fork has volumes: %+v", sb)
	}
	mustFail(t, n, "forked", "test -e /data/f")

	// A volume snapshot, and a volume made from it.
	snap, err := alice.SnapshotVolume(background, "data")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.Checksum, "sha256:") || snap.Kind != "snapshot" {
		t.Errorf("volume snapshot = %+v; want a checksummed snapshot", snap)
	}
	if _, err := alice.CreateVolume(background, api.CreateVolumeRequest{Name: "copy", From: snap.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Suspend(background, "forked"); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.AttachVolume(background, "copy", api.AttachVolumeRequest{Sandbox: "forked", Path: "/copy"}); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, "forked", "head -c 31 /copy/f"); out != volumeMarker {
		t.Errorf("the volume made from the snapshot holds %q", out)
	}

	// Terminated sandboxes let go of their volumes, which stay; then they can go.
	for _, sb := range []string{"w", "r", "forked"} {
		if _, err := alice.Terminate(background, sb); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := alice.GetVolume(background, "data"); err != nil || len(v.Attachments) != 0 {
		t.Fatalf("after its sandboxes ended the volume is %+v, %v; want it kept, unattached", v, err)
	}
	n.Manager.WaitCleanups(background)

	// Nothing written inside is on the host in the clear.
	imgPath := filepath.Join(volDir, vol.ID, "volume.img")
	if err := loopdev.WaitReleased(imgPath); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(img, []byte(volumeMarker)) {
		t.Errorf("the volume's image on the host holds %q in the clear", volumeMarker)
	}
	for _, name := range []string{"data", "copy", snap.ID} {
		if err := alice.DeleteVolume(background, name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
	}
	if left, _ := os.ReadDir(volDir); len(left) != 1 { // binds/
		t.Errorf("volume files left: %v", left)
	}
}
