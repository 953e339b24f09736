package oci

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// A sandbox's disk image lives on the state disk. When that disk fills up, or the host
// loses power, writes the image's ext4 made may never reach it: the file system inside
// can come back with errors recorded, or with metadata whose checksums no longer match
// (the mount then fails with EBADMSG or EUCLEAN). Such an image is checked before it is
// mounted, as a host checks its disks after a power loss: e2fsck in preen mode first,
// which makes only the repairs that lose nothing; only if preening cannot finish, a full
// repair that answers yes to every question (what it cuts loose goes to lost+found).
// Every repair is logged with what e2fsck said. Data the sandbox synced is in the image
// and stays there: e2fsck replays the journal first and never drops a sound inode.

// ext4 superblock fields (the superblock starts at byte 1024 of the image).
const (
	ext4SuperOffset = 1024
	ext4MagicAt     = 0x38 // __le16 s_magic
	ext4StateAt     = 0x3A // __le16 s_state
	ext4Magic       = 0xEF53
	ext4ErrorFS     = 0x0002 // s_state: errors were detected
)

// recordsErrors reports whether the ext4 in img says errors were detected in it (a
// mount on top of that would carry on over whatever the errors broke).
func recordsErrors(img string) (bool, error) {
	f, err := os.Open(img)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var sb [ext4StateAt + 2]byte
	if _, err := f.ReadAt(sb[:], ext4SuperOffset); err != nil {
		if errors.Is(err, io.EOF) {
			return false, nil // not a file system of ours; the mount says what is wrong
		}
		return false, err
	}
	if binary.LittleEndian.Uint16(sb[ext4MagicAt:]) != ext4Magic {
		return false, nil
	}
	return binary.LittleEndian.Uint16(sb[ext4StateAt:])&ext4ErrorFS != 0, nil
}

// needsRepair reports whether a mount failed because the file system is damaged.
func needsRepair(err error) bool {
	return errors.Is(err, unix.EBADMSG) || errors.Is(err, unix.EUCLEAN)
}

// e2fsck exit status bits (e2fsck(8)): below 4 the file system is sound.
const fsckUncorrected = 4

// maxFsckOutput bounds what is kept of one e2fsck run's output (a damaged image can
// make it report every inode).
const maxFsckOutput = 64 << 10

// repairDisk checks and repairs the ext4 in img, which nothing may have mounted: a
// preen first, and a full repair only if the preen cannot finish. why says what made
// it check, for the log.
func repairDisk(ctx context.Context, log *slog.Logger, img, why string) error {
	run := func(mode string) (int, string, error) {
		// The image is the sandbox's to write: what e2fsck says of it is kept bounded.
		out := boundedBuffer{max: maxFsckOutput}
		cmd := exec.CommandContext(ctx, "e2fsck", "-f", mode, img)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), strings.TrimSpace(out.buf.String()), nil
		}
		return 0, strings.TrimSpace(out.buf.String()), err
	}
	code, out, err := run("-p")
	if err != nil {
		return fmt.Errorf("check the disk image %s: e2fsck: %w", img, err)
	}
	if code < fsckUncorrected {
		log.Warn("sandbox disk repaired", "image", img, "why", why, "mode", "preen", "e2fsck", out)
		return nil
	}
	preen := out
	code, out, err = run("-y")
	if err != nil {
		return fmt.Errorf("repair the disk image %s: e2fsck: %w", img, err)
	}
	if code >= fsckUncorrected {
		return fmt.Errorf("the disk image %s is damaged (%s) and e2fsck could not repair it (exit %d): %s", img, why, code, lastLines(out, 5))
	}
	log.Warn("sandbox disk repaired; files it could not place are in its /lost+found", "image", img, "why", why,
		"mode", "yes to every repair", "preen", preen, "e2fsck", out)
	return nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
