package fence

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ChildMain is the fence's child, run by Fence.Command as
// "/proc/self/exe ChildCommand SPEC -- CMD ARGS…" inside its new namespaces. It puts
// up the walls and replaces itself with CMD. It returns only when it could not, with the
// exit code to leave with (ExitSetup, ExitNoExec or ExitNotFound) after
// writing the reason to stderr.
func ChildMain(args []string, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "airlock fence: "+format+"\n", a...)
		return code
	}
	if len(args) < 3 || args[1] != "--" {
		return fail(ExitSetup, "the fence's child needs SPEC -- CMD")
	}
	var spec fenceSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return fail(ExitSetup, "bad fence spec: %v", err)
	}
	argv := args[2:]
	abi, err := fenceABI()
	if err != nil {
		return fail(ExitSetup, "%v", err)
	}
	// Landlock is enforced on this thread only, which then execs: the Go runtime's other
	// threads end with the exec. The thread is never unlocked, so no other goroutine runs
	// on it restricted or not.
	runtime.LockOSThread()
	wd, err := os.Getwd()
	if err != nil {
		return fail(ExitSetup, "working directory: %v", err)
	}
	shm, err := fenceMounts(spec, nil)
	if err != nil {
		return fail(ExitSetup, "hide the host: %v", err)
	}
	// Enter the working directory again through the new mounts, so that a hidden one is
	// not kept open beneath them.
	if err := os.Chdir(wd); err != nil {
		return fail(ExitSetup, "working directory %s is not visible inside the fence (run the command from the workspace)", wd)
	}
	if !spec.Network {
		if err := fenceLoopbackUp(); err != nil {
			return fail(ExitSetup, "loopback: %v", err)
		}
	}
	fd, flags, err := fenceRuleset(spec, abi, shm)
	if err != nil {
		return fail(ExitSetup, "Landlock ruleset: %v", err)
	}
	// An unprivileged caller's child holds ambient capabilities for the set-up; the
	// command gets none.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fail(ExitSetup, "clear ambient capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(ExitSetup, "no_new_privs: %v", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fail(ExitSetup, "Landlock: %v", err)
	}
	unix.Close(fd)
	if spec.Scratch != "" {
		os.Setenv("TMPDIR", spec.Scratch)
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); errors.Is(err, exec.ErrNotFound) {
			return fail(ExitNotFound, "%s: not found", argv[0])
		} else if err != nil {
			return fail(ExitNoExec, "%v", err)
		}
	}
	err = syscall.Exec(path, argv, os.Environ())
	if errors.Is(err, syscall.ENOENT) {
		return fail(ExitNotFound, "%s: %v", argv[0], err)
	}
	return fail(ExitNoExec, "%s: %v", argv[0], err)
}

// fenceLoopbackUp brings up lo in the fresh network namespace.
func fenceLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
