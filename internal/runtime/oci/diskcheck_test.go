package oci

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/loopdev"
)

// TestMountDiskRepairs: a disk image whose ext4 was damaged (errors recorded, metadata
// checksums that no longer match) is repaired before it is mounted, the repair is
// logged, and what was synced to it before is still there.
func TestMountDiskRepairs(t *testing.T) {
	requireDiskTools(t)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, img string)
		mode   string // the e2fsck mode the log names
	}{
		{"errors recorded", func(t *testing.T, img string) { debugfs(t, img, "ssv state 2") }, "preen"},
		// The mount fails with EUCLEAN.
		{"group descriptor checksum", func(t *testing.T, img string) { debugfs(t, img, "set_bg 0 checksum 0x1234") }, "preen"},
		// The mount fails with EBADMSG; a preen cannot open it, a full repair uses a
		// backup superblock.
		{"superblock checksum", func(t *testing.T, img string) {
			f, err := os.OpenFile(img, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("X"), ext4SuperOffset+0x78); err != nil { // s_volume_name
				t.Fatal(err)
			}
		}, "yes to every repair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			img, fsDir := filepath.Join(dir, diskImage), filepath.Join(dir, "fs")
			ctx := context.Background()
			if err := mkfsDisk(ctx, img, 32<<20); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&log, nil))
			mountAndUnmount(t, logger, img, fsDir, func() {
				if err := os.WriteFile(filepath.Join(fsDir, "kept"), []byte("synced"), 0o600); err != nil {
					t.Fatal(err)
				}
			})
			tc.damage(t, img)

			mountAndUnmount(t, logger, img, fsDir, func() {
				if got, err := os.ReadFile(filepath.Join(fsDir, "kept")); err != nil || string(got) != "synced" {
					t.Errorf("after the repair the synced file reads %q, %v; want %q", got, err, "synced")
				}
			})
			if !strings.Contains(log.String(), "sandbox disk repaired") || !strings.Contains(log.String(), `"mode":"`+tc.mode+`"`) {
				t.Errorf("the log does not say the disk was repaired in mode %q:\n%s", tc.mode, log.String())
			}
			if bad, err := recordsErrors(img); err != nil || bad {
				t.Errorf("after the repair the file system records errors: %v, %v", bad, err)
			}
			if out, err := exec.Command("e2fsck", "-f", "-n", img).CombinedOutput(); err != nil {
				t.Errorf("e2fsck -n after the repair: %v\n%s", err, out)
			}
		})
	}
}

// mountAndUnmount mounts img at fsDir, calls fn, syncs and unmounts.
func mountAndUnmount(t *testing.T, log *slog.Logger, img, fsDir string, fn func()) {
	t.Helper()
	if err := mountDisk(context.Background(), log, img, fsDir, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	fn()
	unix.Sync()
	if err := unix.Unmount(fsDir, 0); err != nil {
		t.Fatal(err)
	}
	if err := loopdev.WaitReleased(img); err != nil {
		t.Fatal(err)
	}
}

func debugfs(t *testing.T, img, cmd string) {
	t.Helper()
	if out, err := exec.Command("debugfs", "-w", "-R", cmd, img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs %s: %v: %s", cmd, err, out)
	}
}

// requireDiskTools skips (fails in CI) unless the test can make, loop-mount, damage and
// check ext4 images.
func requireDiskTools(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" (apt-get install -y e2fsprogs)")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs " + strings.Join(missing, " and ")
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
