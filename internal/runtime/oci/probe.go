package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockhq/airlock/internal/version"
)

// probeDir is the directory under the driver's root where Probe builds its container.
// Its name (and its cgroup's) is no sandbox id (ids have no dot), so List never
// reports it.
const probeDir = ".probe"

// probeUID is the host uid (and gid) the probe's container runs as: the unprivileged
// "nobody", which reaches the driver's root only as other host users do, as a
// sandbox's uid does.
const probeUID = 65534

// Probe starts a throwaway container the way Start starts a sandbox's, with the
// engine's flags and logs, a root under the driver's root, the agent binary bound in
// and an unprivileged host uid, runs the agent's --version in it, and removes it. It
// returns why that failed, with the engine's own log lines. The container has its own
// empty network namespace and runs under the engine's own state directory, apart from
// the sandboxes'.
func (d *Driver) Probe(ctx context.Context) error {
	dir := filepath.Join(d.opts.Root, probeDir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := sandboxDir(dir, probeUID); err != nil {
		return err
	}
	rootfs, bundle, state := filepath.Join(dir, "rootfs"), filepath.Join(dir, "bundle"), filepath.Join(dir, "state")
	for _, p := range []string{rootfs, bundle, state} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	}
	// The root is read-only: the mount points are made beforehand, with modes set, not
	// left to the umask (the daemon's keeps others out).
	for _, p := range []string{rootfs, filepath.Join(rootfs, "proc"), filepath.Join(rootfs, filepath.Dir(agentPath))} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
	}
	target := filepath.Join(rootfs, agentPath)
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(target, 0o644); err != nil {
		return err
	}
	data, err := json.Marshal(d.probeSpec(rootfs))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return err
	}
	logArgs, err := d.engineLogArgs(dir)
	if err != nil {
		return err
	}
	args := append(append([]string{"--root", state}, d.opts.Engine.Args...), logArgs...)
	args = append(args, "run", "--bundle", bundle, "probe")
	cmd := exec.CommandContext(ctx, d.opts.Engine.Path, args...)
	var out boundedBuffer
	out.max = 4 << 10
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err == nil && !bytes.Contains(out.buf.Bytes(), []byte(version.AgentBinary+" ")) {
		err = errors.New("the agent's --version printed no version")
	}
	if err != nil {
		err = fmt.Errorf("%s run of a test container: %w: %s%s", d.opts.Engine.Name, err,
			printable(strings.TrimSpace(out.buf.String()), engineLogBytes), engineTail(dir, d.opts.Engine.Name))
	}
	// A run that was cut short leaves the container behind.
	exec.Command(d.opts.Engine.Path, "--root", state, "delete", "--force", "probe").Run()
	return errors.Join(err, d.cg.remove(d.cgroupPath(probeDir)))
}

// probeSpec is the probe container's spec: the agent binary alone, as root of a user
// namespace whose one uid is probeUID.
func (d *Driver) probeSpec(rootfs string) *specs.Spec {
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: probeUID, Size: 1}}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args:            []string{agentPath, "--version"},
			Env:             []string{"PATH=/usr/bin:/bin"},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "probe",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: agentPath, Type: "bind", Source: d.opts.AgentBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			CgroupsPath: d.cgroupPath(probeDir),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.UserNamespace},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
}

// boundedBuffer keeps the first max bytes written to it and drops the rest.
type boundedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
