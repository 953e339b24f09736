package manager

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/units"
)

// Sandboxes' disks are sparse images on the state disk: a sandbox started on a disk
// with no room left finds its writes failing under it and its file system damaged. So
// a create, fork or resume is refused while the state disk has less than
// Config.MinFreeStateDisk free, and the health report says so; running sandboxes go
// on.

// stateDiskFree reads the free and total bytes of the file system holding the state
// directory.
func (m *Manager) stateDiskFree() (free, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.cfg.StateDir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// roomToStart refuses a new container while the state disk is below its floor.
func (m *Manager) roomToStart() error {
	if m.cfg.StateDir == "" || m.cfg.MinFreeStateDisk <= 0 {
		return nil
	}
	free, _, err := m.stateDiskFree()
	if err != nil || free >= m.cfg.MinFreeStateDisk {
		return nil // what cannot be read is the start's to find out
	}
	return errdefs.Unavailable("the node's disk is full: %s free, and sandboxes start or resume only with %s free; running sandboxes go on",
		units.FormatSize(free), units.FormatSize(m.cfg.MinFreeStateDisk)).WithDetails(map[string]any{"reason": "state_disk_full"})
}

// stateDiskCheck is the health report's line for the state disk.
func (m *Manager) stateDiskCheck() (runtime.Check, bool) {
	if m.cfg.StateDir == "" {
		return runtime.Check{}, false
	}
	c := runtime.Check{Name: "state disk"}
	free, size, err := m.stateDiskFree()
	switch {
	case err != nil:
		c.Detail = err.Error()
		c.Degrades = "the daemon cannot tell how much room its state disk has"
	case free < m.cfg.MinFreeStateDisk:
		c.Detail = fmt.Sprintf("%s: %s free of %s", m.cfg.StateDir, units.FormatSize(free), units.FormatSize(size))
		c.Degrades = fmt.Sprintf("no sandbox starts or resumes until %s is free", units.FormatSize(m.cfg.MinFreeStateDisk))
	default:
		c.OK = true
		c.Detail = fmt.Sprintf("%s: %s free of %s", m.cfg.StateDir, units.FormatSize(free), units.FormatSize(size))
	}
	return c, true
}
