package gvisor

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/oci"
)

// Platform is the runsc platform Airlock runs: systrap needs no KVM.
const Platform = "systrap"

// Engine is the OCI driver's engine for the runsc binary at path: the systrap platform,
// no overlay of runsc's own over the root (the driver's overlay and its disk cap hold
// the sandbox's writes), a new empty network namespace for each gofer (a shared one
// would be a mount under runsc's root that outlives its sandboxes), and the sandbox's
// descriptors passed one by one.
func Engine(path string) oci.Engine {
	return oci.Engine{
		Name:       "runsc",
		Path:       path,
		Args:       []string{"--platform=" + Platform, "--overlay2=none", "--gofer-network-namespace=new"},
		PassFDs:    true,
		Sentry:     true,
		Checkpoint: true,
		Logs:       logFlags,
	}
}

// logFlags has runsc log each start into dir: the run command, the sandbox's kernel
// (boot) and its gofer at runsc's default level (no debug logging), each to
// <command>.log, and Go runtime messages of the sandbox's processes to panic.log.
func logFlags(dir string) []string {
	return []string{"--debug-log=" + dir + "/%COMMAND%.log", "--panic-log=" + dir + "/%COMMAND%.log"}
}

// Driver runs sandboxes under runsc through the OCI driver: the same bundle, root
// filesystem, disk cap, cgroup limits and agent, with gVisor's kernel between sandbox
// code and the host's.
type Driver struct {
	*oci.Driver
	path   string
	starts startHealth
}

// New returns a driver for the runsc at path, which Check must have found usable; opts
// are the OCI driver's (its own root, runtime root, cgroup parent and disk pool).
func New(ctx context.Context, path string, opts oci.Options) (*Driver, error) {
	if c := Check(ctx, path); !c.OK {
		return nil, fmt.Errorf("gvisor: %s: %s", c.Detail, c.Degrades)
	}
	e := Engine(path)
	opts.Engine = &e
	d, err := oci.New(opts)
	if err != nil {
		return nil, err
	}
	return &Driver{Driver: d, path: path}, nil
}

// Start implements runtime.Driver, and keeps the outcome for Health.
func (d *Driver) Start(ctx context.Context, s runtime.Spec) error {
	err := d.Driver.Start(ctx, s)
	d.starts.record(err)
	return err
}

// Health implements runtime.HealthChecker: the host's parts are the runc driver's to
// report; this says which runsc runs and how, and whether sandboxes start under it
// (health.go).
func (d *Driver) Health(ctx context.Context) []runtime.Check {
	c := Check(ctx, d.path)
	c.Optional = false
	c.Name = "runtime runsc"
	if c.OK {
		d.starts.check(ctx, &c, d.Probe)
	}
	return []runtime.Check{c}
}
