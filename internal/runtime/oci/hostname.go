package oci

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	airlockrt "github.com/airlockhq/airlock/internal/runtime"
)

var _ airlockrt.Hostnamer = (*Driver)(nil)

// RenamesHost implements runtime.Hostnamer.
func (d *Driver) RenamesHost() bool { return !d.opts.Engine.Sentry }

// SetHostname implements runtime.Hostnamer: it sets the host name of the running
// container's UTS namespace, entered through a pidfd of its init (checked to be in the
// sandbox's cgroup). An engine with a kernel of its own has no namespace on the host to
// enter: it returns an error.
func (d *Driver) SetHostname(ctx context.Context, id, name string) error {
	if d.opts.Engine.Sentry {
		return errors.New("this runtime's sandboxes take their host name only as they start")
	}
	pidfd, _, err := d.initPidfd(id)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	errc := make(chan error, 1)
	go func() {
		// This thread enters the container's UTS namespace; it is never unlocked, so it
		// ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(pidfd, unix.CLONE_NEWUTS); err != nil {
			errc <- fmt.Errorf("enter the sandbox's UTS namespace: %w", err)
			return
		}
		errc <- unix.Sethostname([]byte(name))
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
