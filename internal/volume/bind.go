package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/idmap"
)

func (h *Host) bindDir(sandbox string) string { return filepath.Join(h.dir, bindsName, sandbox) }

// Bind mounts volume id's data (opened: Open first) for sandbox, id-mapped so that
// files on the volume owned by ids 0..IDRange-1 are the sandbox's own from uidBase on,
// read-only if ro, and returns the mount's path for the sandbox's container to bind.
// The mapping goes through userns, a user namespace of exactly that mapping (its
// runtime's for the sandbox; it is checked against the volume's root), or, nil, one
// made for the mount.
func (h *Host) Bind(sandbox, id string, uidBase uint32, userns *os.File, ro bool) (string, error) {
	if err := errors.Join(checkID(sandbox), checkID(id)); err != nil {
		return "", err
	}
	defer h.lock(id)()
	target := filepath.Join(h.bindDir(sandbox), id)
	if err := idmap.Unmount(target); err != nil { // what a crash left
		return "", err
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return "", err
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, filepath.Join(h.mnt(id), dataName), &how)
	if err != nil {
		return "", fmt.Errorf("volume %s is not open: %w", id, err)
	}
	dir := os.NewFile(uintptr(fd), dataName)
	defer dir.Close()
	mp := idmap.Mapping{ToUID: uidBase, ToGID: uidBase, Size: IDRange}
	if err := idmap.MountNS(dir, target, mp, userns, ro); err != nil {
		os.Remove(target)
		return "", err
	}
	return target, nil
}

// Unbind removes every volume mount of sandbox, and returns the volumes it had.
func (h *Host) Unbind(sandbox string) ([]string, error) {
	if err := checkID(sandbox); err != nil {
		return nil, err
	}
	dir := h.bindDir(sandbox)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := idmap.Unmount(p); err != nil {
			return ids, err
		}
		if err := os.Remove(p); err != nil {
			return ids, err
		}
		ids = append(ids, e.Name())
	}
	return ids, os.Remove(dir)
}

// Bound are the sandboxes with volume mounts here.
func (h *Host) Bound() []string {
	entries, _ := os.ReadDir(filepath.Join(h.dir, bindsName))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// inUse says whether a sandbox's mount of volume id is there.
func (h *Host) inUse(id string) bool {
	for _, sb := range h.Bound() {
		if _, err := os.Lstat(filepath.Join(h.bindDir(sb), id)); err == nil {
			return true
		}
	}
	return false
}
