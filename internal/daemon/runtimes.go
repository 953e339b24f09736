package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/version"
)

// openRuntimes makes the default runtime's driver (runc, or Options.Driver) and runsc.
func (n *Node) openRuntimes(ctx context.Context, cfg config.Config, set config.Settings, opts Options) error {
	if opts.Driver != nil {
		d, err := opts.Driver(n.Images)
		if err != nil {
			return err
		}
		n.Driver = d
		if opts.WrapDriver != nil {
			n.Driver = opts.WrapDriver(n.Driver)
		}
		return nil
	}
	agentBin := opts.AgentBinary
	if agentBin == "" {
		var err error
		if agentBin, err = installAgent(filepath.Join(cfg.StateDir, "bin")); err != nil {
			return fmt.Errorf("install agent binary: %w", err)
		}
	}
	rlog := n.log.With("component", "runtime")
	base := oci.Options{AgentBinary: agentBin, Images: n.Images, TmpfsBytes: set.TmpfsSize, DiskPoolBytes: set.DefaultDisk, Log: rlog}
	ro := base
	ro.Root, ro.RuncRoot, ro.Runc, ro.CgroupParent = filepath.Join(cfg.StateDir, "sandboxes"), filepath.Join(cfg.StateDir, "runc"), cfg.Runc, cfg.CgroupParent
	var err error
	if n.Runc, err = oci.New(ro); err != nil {
		return err
	}
	n.closers = append(n.closers, func() { n.Runc.Close() })
	so := base
	so.Root, so.RuncRoot, so.CgroupParent = filepath.Join(cfg.StateDir, "sandboxes-runsc"), filepath.Join(cfg.StateDir, "runsc"), cfg.CgroupParent+"-runsc"
	so.DiskPoolDir = filepath.Join(cfg.StateDir, "disk-pool-runsc")
	if n.Runsc, err = openRunsc(ctx, cfg, so, n.log); err != nil {
		return err
	}
	n.Driver = n.Runc
	if n.Runsc != nil {
		n.closers = append(n.closers, func() { n.Runsc.Close() })
		if cfg.DefaultRuntime == "runsc" {
			n.Driver = n.Runsc
		}
	}
	if opts.WrapDriver != nil {
		n.Driver = opts.WrapDriver(n.Driver)
	}
	return nil
}

// openRunsc returns the node's gVisor driver: nil when the configuration turns runsc off
// or none is found, an error when one is asked for (by path or as the default runtime)
// and cannot run.
func openRunsc(ctx context.Context, cfg config.Config, opts oci.Options, log *slog.Logger) (*gvisor.Driver, error) {
	path := cfg.Runsc
	switch path {
	case "off":
		return nil, nil
	case "":
		p, ok, err := findRunsc()
		if err != nil {
			if cfg.DefaultRuntime == "runsc" {
				return nil, err
			}
			log.Warn("not using runsc", "err", err)
			return nil, nil
		}
		if !ok || !gvisor.Check(ctx, p).OK {
			if cfg.DefaultRuntime == "runsc" {
				return nil, errors.New("default_runtime is runsc, and no runsc that can run here was found (install one: make runsc)")
			}
			return nil, nil
		}
		path = p
	}
	d, err := gvisor.New(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("runtime runsc: %w", err)
	}
	return d, nil
}

// findRunsc is gvisor.Find for a runsc the daemon may run: checking one runs it, as
// root, so one another user could have put there is an error, never run.
func findRunsc() (path string, ok bool, err error) {
	if path, ok = gvisor.Find(); ok {
		err = TrustedFile(path, "runsc found on PATH")
	}
	return path, ok, err
}

// probeRunsc is gvisor.Probe for a runsc the daemon may run (findRunsc).
func probeRunsc(ctx context.Context) (runtime.Check, bool) {
	p, ok, err := findRunsc()
	switch {
	case err != nil:
		return runtime.Check{Name: "gvisor runsc", Optional: true, Detail: err.Error(), Degrades: "runsc cannot be used"}, true
	case !ok:
		return runtime.Check{}, false
	}
	return gvisor.Check(ctx, p), true
}

// installAgent copies the agent's binary (airlock-agent, beside the running one) into dir
// (unless an identical copy is there), so every sandbox binds a stable file that a
// rebuild elsewhere does not change.
func installAgent(dir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(filepath.Dir(exe), version.AgentBinary)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the agent's binary %s is not beside %s (make install puts them side by side): %w", version.AgentBinary, exe, err)
	}
	dst := filepath.Join(dir, "airlock")
	want, err := fileHash(bin)
	if err != nil {
		return "", err
	}
	if have, err := fileHash(dst); err == nil && have == want {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	src, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".airlock-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil { // sandboxes execute it; gVisor reads it to load it
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}

func fileHash(p string) ([32]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, err
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
