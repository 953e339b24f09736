package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/runtime"
)

// Saving a container's memory (runsc only). runsc writes the sandbox's kernel state,
// its processes and their memory into a directory, and restores a new container from
// it over the same bundle and root filesystem. What crosses a save and restore:
//   - The container's standard descriptors are given anew by the restore; descriptors
//     passed with --pass-fd are not (runsc's restore has no such flag). So the agent's
//     channel from the broker is its stdin (driver.go run), and a restore hands it a
//     new broker's end; the ready pipe, closed by then, is not needed.
//   - runsc's --overlay2=none keeps the root's writes in the driver's upper layer, not
//     in the image; the upper layer must be the same on both sides, so nothing may
//     change it between a Checkpoint and a Restore.
//   - Connections from the host cannot be saved: the agent closes the ones it holds
//     first (agent.Client.Quiesce); a call that opens one meanwhile fails the save,
//     and the caller falls back. TCP connections inside go with the save.
// runc would need CRIU; its engine does not checkpoint.

var _ runtime.Checkpointer = (*Driver)(nil)

// ErrNoCheckpoint is returned by Checkpoint and Restore under an engine that cannot
// save memory.
var ErrNoCheckpoint = errors.New("this runtime cannot save a sandbox's memory")

// Checkpoints implements runtime.Checkpointer.
func (d *Driver) Checkpoints() bool { return d.opts.Engine.Checkpoint }

// Checkpoint implements runtime.Checkpointer: zero pages are left out of the image.
func (d *Driver) Checkpoint(ctx context.Context, id, dir string) error {
	if err := d.prepareSave(ctx, id, dir); err != nil {
		return err
	}
	if err := d.save(ctx, id, dir); err != nil {
		return err
	}
	return d.Stop(ctx, id)
}

// prepareSave checks that the engine can save memory, makes dir, and quiesces the
// agent: what both kinds of save do first.
func (d *Driver) prepareSave(ctx context.Context, id, dir string) error {
	if !d.opts.Engine.Checkpoint {
		return fmt.Errorf("%s: %w", d.opts.Engine.Name, ErrNoCheckpoint)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return d.quiesce(ctx, id)
}

// quiesce has the agent close its host connections: they cannot be saved.
func (d *Driver) quiesce(ctx context.Context, id string) error {
	cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
	if err := cl.Quiesce(ctx); err != nil {
		return fmt.Errorf("close the agent's connections: %w", err)
	}
	return nil
}

// save writes the container's image into dir; extra are more checkpoint flags.
func (d *Driver) save(ctx context.Context, id, dir string, extra ...string) error {
	args := append([]string{"checkpoint", "--exclude-committed-zero-pages", "--image-path", dir}, extra...)
	_, err := d.runc(ctx, append(args, d.containerID(id))...)
	return err
}

// CheckpointFrozen implements runtime.Checkpointer: the container is paused (Freeze)
// before the save and the save resumes its kernel's tasks only as far as the pause
// allows, so nothing runs between the image and the caller's copy of its files.
func (d *Driver) CheckpointFrozen(ctx context.Context, id, dir string) error {
	if err := d.prepareSave(ctx, id, dir); err != nil {
		return err
	}
	if err := d.Freeze(ctx, id); err != nil {
		return err
	}
	if err := d.save(ctx, id, dir, "--leave-running"); err != nil {
		d.Thaw(context.WithoutCancel(ctx), id)
		return err
	}
	return nil
}

// Restore implements runtime.Checkpointer.
func (d *Driver) Restore(ctx context.Context, s runtime.Spec, dir string) error {
	if !d.opts.Engine.Checkpoint {
		return fmt.Errorf("%s: %w", d.opts.Engine.Name, ErrNoCheckpoint)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("memory image: %w", err)
	}
	return d.start(ctx, s, dir)
}
