package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
)

var createVerb = &verb{
	name:  "create",
	args:  "NAME [--image IMG] [--cpu N] [--memory SIZE] [--pids N] [--open-files N] [--disk SIZE] [--network MODE] [--allow HOST[:PORT][/METHODS]]... [--env K=V]... [--label K=V]... [--node-selector K=V]... [--max-lifetime D] [--idle-suspend D] [--ttl D] [--workspace DIR[:ro]] [--volume NAME:/PATH[:ro]]... [--idempotency-key K]",
	short: "create a sandbox and wait until it runs",
	long: `SIZE is bytes (1048576) or a number with a unit: 512M, 1G, 1.5GiB.
--image names an image here or a registry reference (python:3.12-slim): the daemon
pulls it first when it is not here (--pull missing, the default), every time (always),
or never; the pull shows a progress bar per layer on a terminal.
--workspace mounts a directory of this machine at /workspace as it is (no copy),
read-write or with :ro read-only: its owner shows as the sandbox's root, so what the
sandbox writes there is yours. Only a directory you own, and only through the daemon's
unix socket.
--volume attaches one of your volumes (airlock volume create) at /PATH, read-only with
:ro; a volume has one writer at a time.
Prints NAME ID STATE IMAGE GEN, or the operation and sandbox as JSON with -o json.`,
	run: runCreate,
}

// limitFlags are the resource flags create and run share.
type limitFlags struct {
	image     string
	pull      string
	runtime   string
	role      string
	cpu       float64
	memory    sizeFlag
	pids      int64
	openFiles int64
	disk      sizeFlag
	env       kvFlag
	net       networkFlags
	// also, if set, adds to every request made (run's lifecycle flags).
	also func(*api.CreateSandboxRequest) error
}

func (l *limitFlags) register(c *cmd, all bool) {
	l.env = kvFlag{}
	c.fs.StringVar(&l.image, "image", "", "image `IMG`: a name, a digest or a registry reference such as python:3.12-slim (default host)")
	c.fs.StringVar(&l.pull, "pull", "", "`WHEN` the daemon pulls the image from its registry first: missing (the default: when it is not here), always or never")
	c.fs.StringVar(&l.runtime, "runtime", "", "runtime `NAME` to run the sandbox (default the node's; airlock status lists them)")
	c.fs.StringVar(&l.role, "role", "", "the one role `R` the sandbox acts with, one of yours (default: all of yours)")
	c.fs.Float64Var(&l.cpu, "cpu", 0, "CPU limit in cores: `N`, fractions allowed")
	c.fs.Var(&l.memory, "memory", "memory limit: `SIZE` such as 512M or 1.5GiB")
	c.fs.Var(l.env, "env", "environment variable `K=V` (repeatable)")
	c.fs.Var(l.env, "e", "short for --env")
	l.net.register(c)
	if all {
		c.fs.Int64Var(&l.pids, "pids", 0, "maximum number of processes: `N`")
		c.fs.Int64Var(&l.openFiles, "open-files", 0, "maximum open files per process: `N`")
		c.fs.Var(&l.disk, "disk", "cap on the sandbox's writable layer: `SIZE` (default 10GiB)")
	}
}

func (l *limitFlags) request(name string) (api.CreateSandboxRequest, error) {
	if l.cpu < 0 || l.pids < 0 || l.openFiles < 0 {
		return api.CreateSandboxRequest{}, usagef("--cpu, --pids and --open-files must not be negative")
	}
	req := api.CreateSandboxRequest{
		Name:  name,
		Image: l.image, Pull: l.pull,
		Runtime: l.runtime, Role: l.role,
		Limits:  api.Limits{CPU: l.cpu, Memory: int64(l.memory), PIDs: l.pids, OpenFiles: l.openFiles, Disk: int64(l.disk)},
		Env:     l.env.orNil(),
		Network: l.net.policy(),
	}
	if l.also != nil {
		if err := l.also(&req); err != nil {
			return api.CreateSandboxRequest{}, err
		}
	}
	return req, nil
}

func runCreate(c *cmd, args []string) error {
	var lim limitFlags
	lim.register(c, true)
	labels := kvFlag{}
	c.fs.Var(labels, "label", "label `K=V` (repeatable)")
	selector := kvFlag{}
	c.fs.Var(selector, "node-selector", "place it on a node labelled `K=V` (repeatable; config node.labels)")
	var life lifecycleFlags
	life.register(c)
	key := c.fs.String("idempotency-key", "", "idempotency key `K`: a retry with the same key returns the same operation")
	workspace := c.fs.String("workspace", "", "mount directory `DIR` of this machine at /workspace; DIR:ro read-only")
	var vols repeatFlag
	c.fs.Var(&vols, "volume", "attach volume `NAME:/PATH[:ro]` (repeatable)")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	req, err := lim.request(pos[0])
	if err != nil {
		return err
	}
	req.Labels, req.NodeSelector = labels.orNil(), selector.orNil()
	if req.Volumes, err = volumeFlag(vols); err != nil {
		return err
	}
	if *workspace != "" {
		if req.Workspace, err = workspaceFlag(*workspace); err != nil {
			return err
		}
	}
	if err := life.apply(c, &req); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.Create(c.ctx, req, c.createOpts(req.Image, c.callOpts(*key, 0)...)...)
	if err != nil {
		return err
	}
	if c.json() {
		err = c.printJSON(resp)
	} else if resp.Sandbox != nil {
		err = printSandboxRow(c.stdout, resp.Sandbox)
	} else {
		err = printOperation(c.stdout, &resp.Operation, nil)
	}
	if err != nil {
		return err
	}
	if sb := resp.Sandbox; sb != nil && sb.State == api.StateFailed {
		fmt.Fprintf(c.stderr, "airlock: sandbox %s failed: %s\n", sb.Name, termSafe(sb.Failure))
		return ExitError{1}
	}
	return nil
}

// lifecycleFlags are the lifetime flags of create and run.
type lifecycleFlags struct{ maxLifetime, idle, ttl *time.Duration }

func (l *lifecycleFlags) register(c *cmd) {
	l.maxLifetime = c.fs.Duration("max-lifetime", 0, "maximum lifetime `D`, e.g. 2h (default 8h)")
	l.idle = c.fs.Duration("idle-suspend", 0, "suspend after `D` without inbound traffic (default 10m, at least 1m)")
	l.ttl = c.fs.Duration("ttl", 0, "terminate after `D` suspended (default 168h)")
}

// apply puts the flags that were given in req; one given as 0 is sent too, and the
// daemon refuses it with the allowed range.
func (l *lifecycleFlags) apply(c *cmd, req *api.CreateSandboxRequest) error {
	if *l.maxLifetime < 0 || *l.idle < 0 || *l.ttl < 0 {
		return usagef("--max-lifetime, --idle-suspend and --ttl must be positive")
	}
	if c.isSet("max-lifetime") {
		req.MaxLifetime = l.maxLifetime.String()
	}
	if c.isSet("idle-suspend") {
		req.IdleSuspend = l.idle.String()
	}
	if c.isSet("ttl") {
		req.TTL = l.ttl.String()
	}
	return nil
}

// workspaceFlag reads --workspace DIR[:ro|:rw]: the directory made absolute, which must
// exist.
func workspaceFlag(v string) (*api.Workspace, error) {
	dir, access := v, "rw"
	if d, a, ok := strings.Cut(v, ":"); ok && (a == "ro" || a == "rw") {
		dir, access = d, a
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, usagef("--workspace %s: %v", v, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, usagef("--workspace %s: not a directory of this machine", dir)
	}
	return &api.Workspace{Path: abs, Access: access}, nil
}
