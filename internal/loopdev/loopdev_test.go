package loopdev

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ofNoScan is Of, failing t if it looked at every loop device.
func ofNoScan(t *testing.T, img string) string {
	t.Helper()
	before := scans.Load()
	dev, err := Of(img)
	if err != nil {
		t.Fatal(err)
	}
	if n := scans.Load() - before; n != 0 {
		t.Fatalf("Of(%s) looked at every loop device %d times; want the recorded one only", img, n)
	}
	return dev
}

func TestRecord(t *testing.T) {
	img, dev := mounted(t)
	b, err := os.ReadFile(Record(img))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != dev {
		t.Fatalf("record of %s = %q; the mount took %q", img, b, dev)
	}
	if got := ofNoScan(t, img); got != dev {
		t.Fatalf("Of = %q; want %q", got, dev)
	}

	// Without a record (an image from before): every device is looked at.
	if err := Forget(img); err != nil {
		t.Fatal(err)
	}
	before := scans.Load()
	if got, err := Of(img); err != nil || got != dev {
		t.Fatalf("Of without a record = %q, %v; want %q", got, err, dev)
	}
	if scans.Load() == before {
		t.Fatal("Of without a record did not look at every device")
	}
	// A record naming no loop device counts as none.
	if err := os.WriteFile(Record(img), []byte("../../../etc/passwd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Of(img); err != nil || got != dev {
		t.Fatalf("Of with a record of no device = %q, %v; want %q", got, err, dev)
	}
	if err := writeRecord(img, dev); err != nil {
		t.Fatal(err)
	}

	if err := unix.Unmount(filepath.Join(filepath.Dir(img), "mnt"), 0); err != nil {
		t.Fatal(err)
	}
	before = scans.Load()
	if err := WaitReleased(img); err != nil {
		t.Fatal(err)
	}
	if scans.Load() != before {
		t.Fatal("WaitReleased looked at every device")
	}
	if got := ofNoScan(t, img); got != "" {
		t.Fatalf("Of after the unmount = %q; want none", got)
	}
}

// TestRecordStale: a recorded device now backing another image says nothing of this one.
func TestRecordStale(t *testing.T) {
	other, dev := mounted(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(img, dev); err != nil {
		t.Fatal(err)
	}
	if got := ofNoScan(t, img); got != "" {
		t.Fatalf("Of = %q, a device backing %s; want none", got, other)
	}
	if err := Unmounted(img); err != nil {
		t.Fatal(err)
	}
	if got := ofNoScan(t, img); got != "" {
		t.Fatalf("Of of an image never mounted = %q; want none", got)
	}
	if got := ofNoScan(t, other); got != dev {
		t.Fatalf("Of(%s) = %q; want %q", other, got, dev)
	}
}

// TestRecordFailedMount: a mount that fails after attaching (no ext4 in the image)
// still names the device it attached, which goes with its last close.
func TestRecordFailedMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "zero.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := MountDev(img, dir, ""); err == nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		t.Fatal("mounted an image of zeros")
	}
	b, err := os.ReadFile(Record(img))
	if err != nil {
		t.Fatal(err)
	}
	if dev, ok, _ := readRecord(img); !ok || dev == "" {
		t.Fatalf("record after a failed mount = %q; want the device it attached", b)
	}
	if err := WaitReleased(img); err != nil {
		t.Fatal(err)
	}
}
