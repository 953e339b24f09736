package fence

// The host fence runs one command on the host, walled in by the kernel rather than by a
// container. It is put up one of three ways (Way), with the same walls:
//
//	WayReexec, for anyone:           child (/proc/self/exe ChildCommand SPEC -- CMD…)
//	  validate, resolve paths            in fresh user, mount (and net) namespaces:
//	  check Landlock is there            hide /run, /tmp, /var/tmp, homes, /dev/shm, secrets
//	  clone with the namespaces   ──►    bind back the workspace, scratch and extra paths
//	                                     bring loopback up (no network)
//	                                     Landlock on this thread, then execve(CMD)
//
//	WayThread, when this process may make namespaces (root): the child's steps on a
//	locked thread of this process, which then drops every capability and forks and execs
//	CMD; the thread ends after (fence_thread.go). It saves the binary starting again,
//	which costs far more than the command's own fork and exec.
//
//	WayDaemon, for a caller that may not, when an Airlock daemon serves its fence
//	socket: the daemon takes WayThread's steps for it, with the caller's own ids and
//	groups as the kernel reports them for the connection (fence_daemon.go).
//
// Landlock does the file walls (read-only system, writable workspace and scratch, nothing
// else) and, from ABI 4, refuses TCP bind and connect. The mount namespace hides what
// Landlock cannot wall before ABI 9 — UNIX sockets such as the daemon's under /run/airlock,
// an ssh-agent's under /tmp, a container engine's under /run — and a few secret files
// (/etc/shadow, SSH host keys) that a fenced root could otherwise read; its mounts are
// read-only but for the workspace, scratch and extra write paths, which walls what
// Landlock does not: chmod, chown, utimes and extended attributes. The network
// namespace, with only loopback, is the network wall; Landlock's TCP rules are the second.
// The user namespace lets an unprivileged caller make the others, and keeps a fenced root's
// capabilities inside the fence; WayThread, which cannot make one, gives the command no
// capabilities at all.
//
// The fence fails closed and has no weaker mode: without Landlock, or when a namespace or
// a mount cannot be made, the command does not run. Whoever wants a command to run anyway
// decides that above the fence (run it in a sandbox, or on the host unfenced).

import (
	"context"
	"errors"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/errdefs"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ChildCommand is the hidden first argument that makes the airlock binary (or a test
// binary whose TestMain dispatches it) the fence's child. cmd/airlock hands the rest of the
// arguments to ChildMain.
const ChildCommand = "_fence-exec"

// Exit codes of a fenced command beyond the command's own, as env(1) and shells use them.
const (
	ExitSetup    = 125 // the fence could not be put up; the command did not run
	ExitNoExec   = 126 // the command was found but could not be executed
	ExitNotFound = 127 // the command was not found inside the fence
)

// ErrUnavailable is the class of the error Command returns when the host cannot put
// up the fence (no Landlock). It is errdefs.ErrUnavailable.
var ErrUnavailable = errdefs.ErrUnavailable

// DaemonDir is the Airlock daemon's directory of sockets and secrets, which a fenced
// command never sees.
const DaemonDir = "/run/airlock"

// Fence is how one host command is walled in. The zero value (no workspace, no network
// flag) gives a command that sees only the read-only system.
type Fence struct {
	// Workspace is the project directory: writable with Access "rw", read-only with "ro",
	// and neither visible nor readable with "none". It must exist, and must not be "/" nor
	// contain the home directory or DaemonDir.
	Workspace string
	// Access is "none", "ro" or "rw"; empty means "rw" when Workspace is set, else "none".
	Access string
	// Scratch is a writable directory for this run only, also given to the command as
	// TMPDIR. Empty: no scratch directory. The caller makes it and removes it.
	Scratch string
	// Network lets the command use the host's network. Without it, the command gets a
	// network namespace of its own with only loopback, and Landlock (ABI 4 and later)
	// refuses every TCP bind and connect.
	Network bool
	// ExtraRead and ExtraWrite are further paths (directories or files) the command may
	// read, or read and write. The rules of Workspace about "/", the home directory and
	// the daemon's directory apply to them too.
	ExtraRead, ExtraWrite []string
	// Daemon is the fence socket of an Airlock daemon (SocketPath). A caller that may
	// not make the namespaces on a thread of its own has the daemon put the fence up
	// (WayDaemon) when one answers there, rather than starting this binary again.
	Daemon string

	forceReexec bool                                // tests: take WayReexec even when WayThread is possible
	forceDaemon bool                                // tests: take WayDaemon even when WayThread is possible
	dial        func(string) (*net.UnixConn, error) // tests: connect to Daemon (default dialFence)
}

// fenceSpec is what the parent hands the child: the Fence with every path made absolute
// and free of symbolic links, and the homes to hide.
type fenceSpec struct {
	Workspace  string   `json:"workspace,omitempty"`
	Access     string   `json:"access"`
	Scratch    string   `json:"scratch,omitempty"`
	Network    bool     `json:"network"`
	ExtraRead  []string `json:"extra_read,omitempty"`
	ExtraWrite []string `json:"extra_write,omitempty"`
	Homes      []string `json:"homes,omitempty"`
	Resolv     string   `json:"resolv,omitempty"` // where /etc/resolv.conf leads, with Network
}

// Command returns a command that runs argv on the host inside the fence. The caller may
// set its Stdin, Stdout, Stderr, Env and Dir and then starts it; its exit code is the
// command's, or ExitSetup, ExitNoExec or ExitNotFound. argv[0] is looked
// up on the PATH the command gets, inside the fence. Command refuses invalid input with
// errdefs.ErrInvalidArgument and a host without Landlock with ErrUnavailable; in
// both cases nothing runs. It picks WayThread when this process may make namespaces,
// else WayReexec.
func (f Fence) Command(ctx context.Context, argv []string) (*Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errdefs.Invalid("fence: empty command")
	}
	spec, err := f.resolve(fenceHomes(os.Getenv("HOME"), os.Getuid()))
	if err != nil {
		return nil, err
	}
	abi, err := fenceABI()
	if err != nil {
		return nil, err
	}
	c := &Cmd{ctx: ctx, argv: slices.Clone(argv), spec: spec, abi: abi, way: WayReexec}
	switch {
	case f.forceReexec:
	case !f.forceDaemon && fenceThreadCapable():
		c.way = WayThread
	case f.Daemon != "":
		dial := dialFence
		if f.dial != nil {
			dial = f.dial
		}
		if conn, err := dial(f.Daemon); err == nil {
			c.way, c.conn = WayDaemon, conn
		} else if f.forceDaemon {
			return nil, err
		}
	}
	return c, nil
}

// fenceSysProcAttr asks for the child's namespaces. A user namespace always: it lets an
// unprivileged caller make the others, and for root it keeps the command's capabilities
// inside the fence (root maps every id to itself, so files keep their owners; anyone else
// maps only their own ids).
func fenceSysProcAttr(network bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS}
	if !network {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		const all = 1<<32 - 1 // every id but the invalid (uid_t)-1
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: all}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: all}}
		attr.GidMappingsEnableSetgroups = true
	} else {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		// The child keeps, across its exec, just what it needs to mount and to bring up
		// loopback in its namespaces; it clears them before it execs the command.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
	}
	return attr
}

// LandlockABI returns the Landlock ABI version of the running kernel, or
// ErrUnavailable saying why the fence cannot be put up here.
func LandlockABI() (int, error) { return fenceABI() }

// fenceABI returns the Landlock ABI version of the running kernel, or ErrUnavailable.
func fenceABI() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 1 {
		if err == nil {
			err = errors.New("ABI version 0")
		}
		return 0, &errdefs.Error{Class: ErrUnavailable,
			Msg:   "fence: Landlock is not available on this kernel (Linux 5.13 or later, with landlock in the lsm= boot list); refusing to run the command unfenced",
			Cause: err}
	}
	return v, nil
}

// fenceMaxExtraPaths bounds ExtraRead and ExtraWrite together: each is resolved, opened
// and given a Landlock rule, and a daemon does that for any caller.
const fenceMaxExtraPaths = 64

// resolve validates f and makes its paths absolute and free of symbolic links; homes
// are the home directories to hide (fenceHomes).
func (f Fence) resolve(homes []string) (fenceSpec, error) {
	spec := fenceSpec{Access: f.Access, Network: f.Network, Homes: homes}
	if spec.Access == "" {
		spec.Access = "none"
		if f.Workspace != "" {
			spec.Access = "rw"
		}
	}
	switch spec.Access {
	case "none", "ro", "rw":
	default:
		return fenceSpec{}, errdefs.Invalid("fence: unknown workspace access %q (want none, ro or rw)", f.Access)
	}
	var err error
	if f.Workspace != "" {
		if spec.Workspace, err = fenceCheckPath("workspace", f.Workspace, spec.Homes, true); err != nil {
			return fenceSpec{}, err
		}
	} else if spec.Access != "none" {
		return fenceSpec{}, errdefs.Invalid("fence: workspace access %q without a workspace", spec.Access)
	}
	if f.Scratch != "" {
		if spec.Scratch, err = fenceCheckPath("scratch directory", f.Scratch, spec.Homes, true); err != nil {
			return fenceSpec{}, err
		}
	}
	if n := len(f.ExtraRead) + len(f.ExtraWrite); n > fenceMaxExtraPaths {
		return fenceSpec{}, errdefs.Invalid("fence: %d extra paths; at most %d", n, fenceMaxExtraPaths)
	}
	for _, p := range f.ExtraRead {
		r, err := fenceCheckPath("extra read path", p, spec.Homes, false)
		if err != nil {
			return fenceSpec{}, err
		}
		spec.ExtraRead = append(spec.ExtraRead, r)
	}
	for _, p := range f.ExtraWrite {
		r, err := fenceCheckPath("extra write path", p, spec.Homes, false)
		if err != nil {
			return fenceSpec{}, err
		}
		spec.ExtraWrite = append(spec.ExtraWrite, r)
	}
	if f.Network {
		if r, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && r != "/etc/resolv.conf" {
			spec.Resolv = r
		}
	}
	return spec, nil
}

// fenceCheckPath resolves one path the caller lets the command reach, and refuses "/", a
// path that holds a home directory or the daemon's directory, and (with dir) anything but
// a directory.
func fenceCheckPath(what, p string, homes []string, dir bool) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", errdefs.Invalid("fence: %s %q: %v", what, p, err)
	}
	r, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", errdefs.Invalid("fence: %s %q does not exist", what, p)
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", errdefs.Invalid("fence: %s %q: %v", what, p, err)
	}
	if dir && !fi.IsDir() {
		return "", errdefs.Invalid("fence: %s %q is not a directory", what, p)
	}
	if r == "/" {
		return "", errdefs.Invalid("fence: %s may not be /", what)
	}
	for _, h := range homes {
		if fenceWithin(h, r) {
			return "", errdefs.Invalid("fence: %s %q holds the home directory %s; pick a project directory inside it", what, p, h)
		}
	}
	if slices.Contains(fenceHiddenDirs, r) {
		return "", errdefs.Invalid("fence: %s may not be %s, which the fence hides; pick a directory inside it", what, r)
	}
	if fenceWithin(DaemonDir, r) || fenceWithin(r, DaemonDir) {
		return "", errdefs.Invalid("fence: %s %q overlaps Airlock's daemon directory %s", what, p, DaemonDir)
	}
	return r, nil
}

// fenceHomes lists the home directories to hide: home (the caller's $HOME) and the home
// of uid in the user database, each as it is and with symbolic links resolved.
func fenceHomes(home string, uid int) []string {
	var homes []string
	add := func(h string) {
		if h == "" || !filepath.IsAbs(h) {
			return
		}
		h = filepath.Clean(h)
		for _, c := range []string{h, fenceEval(h)} {
			if c != "/" && !slices.Contains(homes, c) {
				homes = append(homes, c)
			}
		}
	}
	add(home)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		add(u.HomeDir)
	}
	return homes
}

func fenceEval(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// fenceWithin reports whether path p is dir or lies below it (both clean and absolute).
func fenceWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
