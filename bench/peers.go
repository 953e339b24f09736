package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// benchUIDBase is the host uid (and gid) that root of the bare runc containers maps to:
// the last of Airlock's default 4096 uid slots, which a benchmark never reaches.
const benchUIDBase = 1<<20 + 4095*65536

// runcPeer runs `true` with a bare `runc run` of one bundle, in the bench's own runc root.
type runcPeer struct {
	runc   string
	root   string // runc --root
	bundle string
	prefix string // container id prefix
	seq    int
	// lastCPU is the CPU time of the last run: runc's and that of every process it
	// waited for (its init, the container's process).
	lastCPU time.Duration
}

// bundleOpts say how a bare runc bundle departs from Airlock's sandbox config.
type bundleOpts struct {
	stateDir        string // the daemon's: bind mounts from there are the sandbox's own
	rootfs          string
	cgroup          string
	keepImageMounts bool  // keep the image's bind mounts (/usr), as in the sandbox
	noSeccomp       bool  // drop the seccomp profile, to show what it costs
	args            []any // the process, instead of `true`
}

// newBundle writes a bundle under dir whose config is Airlock's own sandbox config
// (tmpl, read from a live sandbox) without what belongs to that sandbox: process
// `true`, no agent, resolv.conf or CA bundle mounts, fresh namespaces (none joined by
// path, so runc makes an empty network namespace), root mapped to benchUIDBase, and
// the root filesystem and cgroup of o.
func newBundle(dir string, tmpl map[string]any, o bundleOpts) error {
	b, err := json.Marshal(tmpl)
	if err != nil {
		return err
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	proc, ok1 := c["process"].(map[string]any)
	linux, ok2 := c["linux"].(map[string]any)
	mounts, ok3 := c["mounts"].([]any)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("sandbox config.json lacks process, linux or mounts")
	}
	proc["args"] = []any{"true"}
	if len(o.args) > 0 {
		proc["args"] = o.args
	}
	proc["cwd"] = "/"
	c["root"] = map[string]any{"path": o.rootfs}
	c["hostname"] = "bench"
	delete(c, "annotations")
	var kept []any
	for _, m := range mounts {
		mm, _ := m.(map[string]any)
		dest, _ := mm["destination"].(string)
		typ, _ := mm["type"].(string)
		src, _ := mm["source"].(string)
		own := strings.HasPrefix(dest, "/.airlock") || strings.HasPrefix(src, o.stateDir+"/")
		if typ == "bind" && (own || !o.keepImageMounts) {
			continue
		}
		kept = append(kept, m)
	}
	c["mounts"] = kept
	idmap := []any{map[string]any{"containerID": 0, "hostID": benchUIDBase, "size": 65536}}
	linux["uidMappings"], linux["gidMappings"] = idmap, idmap
	linux["cgroupsPath"] = o.cgroup
	if nss, ok := linux["namespaces"].([]any); ok {
		for _, ns := range nss {
			if m, ok := ns.(map[string]any); ok {
				delete(m, "path")
			}
		}
	}
	if o.noSeccomp {
		delete(linux, "seccomp")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	out, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), out, 0o600)
}

// run times one `runc run` of the bundle to the exit of its process. The container is
// deleted afterwards, outside the timed part.
func (p *runcPeer) run(ctx context.Context) (time.Duration, error) {
	p.seq++
	id := p.prefix + strconv.Itoa(p.seq)
	var out bytes.Buffer
	cmd := command(ctx, p.runc, "--root", p.root, "run", "--bundle", p.bundle, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if cmd.ProcessState != nil {
		p.lastCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	runcDelete(p.runc, p.root, id)
	if err != nil {
		return 0, fmt.Errorf("runc run: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

// start runs the bundle detached (untimed) and returns the container id and a pidfd
// of its process. The container's stdio is a pipe that only carries runc's errors: a
// buffer would keep the wait for runc open as long as the container runs.
func (p *runcPeer) start(ctx context.Context) (string, int, error) {
	p.seq++
	id := p.prefix + strconv.Itoa(p.seq)
	r, w, err := os.Pipe()
	if err != nil {
		return "", -1, err
	}
	defer r.Close()
	cmd := command(ctx, p.runc, "--root", p.root, "run", "--detach", "--bundle", p.bundle, id)
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		runcDelete(p.runc, p.root, id)
		out, _ := io.ReadAll(io.LimitReader(r, 4096))
		return "", -1, fmt.Errorf("runc run --detach: %w: %s", err, strings.TrimSpace(string(out)))
	}
	out, err := command(ctx, p.runc, "--root", p.root, "state", id).Output()
	var st struct {
		Pid int `json:"pid"`
	}
	if err == nil {
		err = json.Unmarshal(out, &st)
	}
	fd := -1
	if err == nil {
		fd, err = pidfdOpen(st.Pid)
	}
	if err != nil {
		runcDelete(p.runc, p.root, id)
		return "", -1, fmt.Errorf("runc state %s: %w", id, err)
	}
	return id, fd, nil
}

// sysPidfdOpen is pidfd_open(2), numbered alike on every architecture.
const sysPidfdOpen = 434

func pidfdOpen(pid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, errno)
	}
	syscall.CloseOnExec(int(fd))
	return int(fd), nil
}

// waitPidfd blocks until the process of the pidfd has exited (the pidfd turns readable
// then), or timeout.
func waitPidfd(fd int, timeout time.Duration) error {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(ep)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	events := make([]syscall.EpollEvent, 1)
	deadline := time.Now().Add(timeout)
	for {
		n, err := syscall.EpollWait(ep, events, int(time.Until(deadline).Milliseconds()))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("process still running after %s", timeout)
		}
		return nil
	}
}

// deleteForce times `runc delete --force` of a running container, which is how
// Airlock's driver stops a sandbox.
func (p *runcPeer) deleteForce(ctx context.Context) (time.Duration, error) {
	id, fd, err := p.start(ctx)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	start := time.Now()
	out, err := command(ctx, p.runc, "--root", p.root, "delete", "--force", id).CombinedOutput()
	d := time.Since(start)
	if err != nil {
		runcDelete(p.runc, p.root, id)
		return 0, fmt.Errorf("runc delete --force: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return d, nil
}

// killWaitDelete times the other way to stop a container: `runc kill KILL`, wait on a
// pidfd for the process to exit, then a plain `runc delete`.
func (p *runcPeer) killWaitDelete(ctx context.Context) (time.Duration, error) {
	id, fd, err := p.start(ctx)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	start := time.Now()
	if out, err := command(ctx, p.runc, "--root", p.root, "kill", id, "KILL").CombinedOutput(); err != nil {
		runcDelete(p.runc, p.root, id)
		return 0, fmt.Errorf("runc kill: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := waitPidfd(fd, 10*time.Second); err != nil {
		runcDelete(p.runc, p.root, id)
		return 0, err
	}
	out, err := command(ctx, p.runc, "--root", p.root, "delete", id).CombinedOutput()
	d := time.Since(start)
	if err != nil {
		runcDelete(p.runc, p.root, id)
		return 0, fmt.Errorf("runc delete: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return d, nil
}

// command is exec.CommandContext with a bound on how long Wait waits for output pipes
// after the process ended, so that a child which inherited one cannot hang the bench.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runcDelete removes a container from a runc root, whatever its state.
func runcDelete(runc, root, id string) {
	exec.Command(runc, "--root", root, "delete", "--force", id).Run()
}

// runcExec times one `runc exec` of `true` into the container named container in the
// runc root root.
func runcExec(ctx context.Context, runc, root, container string) (time.Duration, error) {
	return timeCommand(ctx, "runc exec", runc, "--root", root, "exec", container, "true")
}

// timeCommand times one run of a command to its exit; what names it in the error of a
// run that fails, with the command's output.
func timeCommand(ctx context.Context, what, name string, args ...string) (time.Duration, error) {
	var out bytes.Buffer
	cmd := command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

// podmanImage is the image every podman run uses; importImage makes it.
const podmanImage = "airlock-bench-host"

// importImage imports the tree under rootfs as podmanImage.
func importImage(ctx context.Context, rootfs string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, rootfs)) }()
	var out bytes.Buffer
	cmd := command(ctx, "podman", "import", "-", podmanImage)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, &out, &out
	err := cmd.Run()
	pr.Close()
	if err != nil {
		return fmt.Errorf("podman import: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

func removeImage() {
	exec.Command("podman", "rmi", "--force", podmanImage).Run()
}

// podmanRun times one `podman run --rm` of `true` with the extra arguments.
func podmanRun(ctx context.Context, extra []string) (time.Duration, error) {
	args := append([]string{"run", "--rm"}, extra...)
	args = append(args, podmanImage, "/usr/bin/true")
	var out bytes.Buffer
	cmd := command(ctx, "podman", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

// podmanLimits are the --ulimit arguments every podman run needs on this host. Podman
// asks for RLIMIT_NOFILE 1048576 and a large RLIMIT_NPROC by default; where runc's hard
// limits are lower, runc fails with "error setting rlimit ... operation not permitted".
// nofile matches what Airlock gives a sandbox (65536, capped at the hard limit); nproc
// is the hard limit capped at kernel.pid_max, the highest this podman accepted here.
func podmanLimits() []string {
	var rl syscall.Rlimit
	nofile := uint64(65536)
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		nofile = min(nofile, rl.Max)
	}
	const rlimitNproc = 6
	nproc := uint64(32768)
	if syscall.Getrlimit(rlimitNproc, &rl) == nil {
		nproc = rl.Max
	}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			nproc = min(nproc, n)
		}
	}
	return []string{
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", nproc, nproc),
	}
}

// toolVersion is the first line of `tool --version`, or the error.
func toolVersion(tool string) string {
	out, err := exec.Command(tool, "--version").CombinedOutput()
	if err != nil {
		return "unavailable: " + err.Error()
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
