package fence

// WayThread: the walls of ChildMain, put up on one OS thread of this process
// instead of in a fresh copy of the binary. Namespaces, no_new_privs, the Landlock domain
// and capabilities all belong to a thread, and a fork from that thread inherits them:
//
//	goroutine, LockOSThread (never unlocked: the thread ends with the goroutine;
//	                         never the main thread, which Go keeps)
//	  unshare(CLONE_NEWNS [|CLONE_NEWNET])   mount namespace (and CLONE_FS) of its own
//	  fenceMounts, chdir, loopback up         as the child does
//	  no_new_privs, landlock_restrict_self    this thread only, not the process
//	  drop every capability                   bounding set, ambient, effective, permitted
//	  fork and exec the command               it inherits all of the above
//
// A threaded process may unshare a mount or network namespace for one thread but not a
// user namespace, so this way needs the capabilities to make them, and the command runs
// with the caller's ids and no capabilities at all where WayReexec gives it its
// capabilities inside a user namespace of its own. Go starts new threads from a template
// thread while a goroutine is locked, so no other thread inherits any of it.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// fenceThreadCaps are the capabilities WayThread needs in this process: to make the
// namespaces and mounts, to bring loopback up, and to drop the bounding set.
var fenceThreadCaps = []uint{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP}

// fenceThreadCapable reports whether the calling thread holds fenceThreadCaps.
func fenceThreadCapable() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	for _, c := range fenceThreadCaps {
		if data[c/32].Effective&(1<<(c%32)) == 0 {
			return false
		}
	}
	return true
}

// startThread puts the fence up on a new locked thread and starts the command from it.
func (c *Cmd) startThread() error {
	done := make(chan error, 1)
	onSpareThread(func() {
		c.tid = unix.Gettid()
		done <- c.fenceThread()
	})
	return <-done
}

// onSpareThread runs fn in a new goroutine locked to a thread other than the main one,
// and never unlocks it: when fn returns, Go ends the thread, and with it whatever fn did
// to it (namespaces, a Landlock domain, ids, dropped capabilities). Go never ends the
// main thread (it parks it for good), and /proc/self shows the main thread's
// namespaces: that one is left untouched, held while another goroutine, which then runs
// elsewhere, runs fn.
func onSpareThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			defer runtime.UnlockOSThread()
			done := make(chan struct{})
			onSpareThread(func() {
				defer close(done)
				fn()
			})
			<-done
			return
		}
		fn()
	}()
}

// fenceThread runs on the locked thread. Any error leaves the command unstarted.
//
// For a caller of the daemon (c.caller), the thread first joins the caller's namespaces,
// the paths are resolved and opened with the
// caller's groups and file system ids, the mounts and loopback made as root, and then the
// thread takes the caller's ids for good before it enters the working directory and
// builds and enforces the Landlock ruleset, so the caller's own rights are the bound of
// everything the command reaches.
func (c *Cmd) fenceThread() error {
	spec := c.spec
	dir := c.Dir
	if dir == "" {
		wd, err := unix.Getwd()
		if err != nil {
			return fmt.Errorf("fence: working directory: %w", err)
		}
		dir = wd
	}
	// The caller's cgroups, opened as root in the daemon's mount namespace (in the
	// fence's, its mounts become read-only, and a mount with a file open for writing
	// cannot).
	var procs []*os.File
	defer func() {
		for _, f := range procs {
			f.Close()
		}
	}()
	if c.caller != nil {
		var err error
		if procs, err = c.caller.openCgroups(); err != nil {
			return fmt.Errorf("fence: the caller's cgroups: %w", err)
		}
		if err := c.caller.enterNamespaces(spec.Network); err != nil {
			return fmt.Errorf("fence: enter the caller's namespaces: %w", err)
		}
	}
	flags := unix.CLONE_NEWNS // implies CLONE_FS: this thread's root and cwd become its own
	if !spec.Network {
		flags |= unix.CLONE_NEWNET
	}
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("fence: new namespaces for the fence thread: %w", err)
	}

	var open func(string) (int, error)
	if c.caller != nil {
		var err error
		if spec, err = c.caller.resolve(c.spec); err != nil {
			return err
		}
		open = c.caller.open
	}
	shm, err := fenceMounts(spec, open)
	if err != nil {
		return fmt.Errorf("fence: hide the host: %w", err)
	}
	if c.caller == nil {
		// Enter the working directory through the new mounts, as the child does.
		if err := unix.Chdir(dir); err != nil {
			return fenceDirError(dir)
		}
	}
	if !spec.Network {
		if err := fenceLoopbackUp(); err != nil {
			return fmt.Errorf("fence: loopback: %w", err)
		}
	}
	if c.caller != nil {
		if err := fenceDropBounding(); err != nil {
			return fmt.Errorf("fence: drop capabilities: %w", err)
		}
		if err := c.caller.become(); err != nil {
			return fmt.Errorf("fence: take the caller's ids: %w", err)
		}
		if err := fenceCapsetNone(); err != nil {
			return fmt.Errorf("fence: drop capabilities: %w", err)
		}
		// This thread's own since CLONE_FS; set after the mounts, whose points it made.
		unix.Umask(c.caller.umask)
		if err := c.caller.chdir(dir); err != nil {
			return fenceDirError(dir)
		}
	}
	fd, lflags, err := fenceRuleset(spec, c.abi, shm)
	if err != nil {
		return fmt.Errorf("fence: Landlock ruleset: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("fence: no_new_privs: %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, lflags); err != nil { // this thread only
		return fmt.Errorf("fence: Landlock: %w", err)
	}
	if c.caller == nil {
		if err := fenceDropBounding(); err != nil {
			return fmt.Errorf("fence: drop capabilities: %w", err)
		}
		if err := fenceCapsetNone(); err != nil {
			return fmt.Errorf("fence: drop capabilities: %w", err)
		}
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	if spec.Scratch != "" {
		env = append(slices.Clip(env), "TMPDIR="+spec.Scratch) // exec keeps the last of a name
	}
	var stderr io.Writer = c.Stderr
	switch {
	case c.caller != nil:
		// Never written by the daemon, which a caller's stderr could block: the
		// caller writes the reason (c.failedMsg) itself.
		stderr = &c.failedMsg
	case stderr == nil:
		stderr = io.Discard
	}
	path, code, err := fenceLookPath(c.argv[0], env)
	if err != nil {
		fmt.Fprintf(stderr, "airlock fence: %v\n", err)
		c.failed = &ExitError{Code: code}
		return nil
	}
	cmd := exec.CommandContext(c.ctx, path, c.argv[1:]...)
	cmd.Args = c.argv
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.WaitDelay = c.WaitDelay
	if c.caller != nil {
		// A session of its own: never the daemon's controlling terminal (/dev/tty).
		// Traced, so that it stops right after its exec, before its first instruction,
		// to be moved into the caller's cgroups and given the caller's limits.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Ptrace: true}
	}
	if err := cmd.Start(); err != nil {
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Op != "fork/exec" {
			return fmt.Errorf("fence: %w", err)
		}
		code := ExitNoExec
		if errors.Is(pe.Err, unix.ENOENT) {
			code = ExitNotFound
		}
		fmt.Fprintf(stderr, "airlock fence: %s: %v\n", c.argv[0], pe.Err)
		c.failed = &ExitError{Code: code}
		return nil
	}
	c.cmd = cmd
	if c.caller != nil {
		if err := c.caller.settle(cmd.Process.Pid, procs); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			c.cmd = nil
			return fmt.Errorf("fence: %w", err)
		}
	}
	return nil
}

// fenceLookPath finds name as exec.LookPath does, but on the PATH of env, and returns
// the exit code that goes with a failure.
func fenceLookPath(name string, env []string) (string, int, error) {
	if strings.Contains(name, "/") {
		return name, 0, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) != nil {
			continue
		}
		if !filepath.IsAbs(p) {
			return "", ExitNoExec, fmt.Errorf("%s: %w", name, exec.ErrDot)
		}
		return p, 0, nil
	}
	return "", ExitNotFound, fmt.Errorf("%s: not found", name)
}

// Securebits (linux/securebits.h): uid 0 gains no capabilities at exec, nor may any be
// made ambient, and neither may be changed back.
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// fenceDirError is a working directory the command cannot enter inside the fence.
func fenceDirError(dir string) error {
	return fmt.Errorf("fence: working directory %s is not visible inside the fence (run the command from the workspace)", dir)
}

// fenceDropBounding empties the calling thread's bounding set and locks it out of
// gaining capabilities again (at exec as uid 0, or ambient). It needs CAP_SETPCAP, and
// leaves the thread's own capabilities as they were (fenceCapsetNone drops those).
func fenceDropBounding() error {
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("bounding set: %w", err)
		}
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient: %w", err)
	}
	return nil
}

// fenceCapsetNone leaves the calling thread without capabilities.
func fenceCapsetNone() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil { // this thread only
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
