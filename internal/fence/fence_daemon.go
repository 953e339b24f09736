package fence

// WayDaemon: an Airlock daemon, which runs as root, puts the fence up for a caller that
// may not make the namespaces itself, and saves it the binary starting again:
//
//	caller (any uid)                       daemon: Server on SocketPath
//	  Command: connect                     accept; SO_PEERCRED and SO_PEERGROUPS give
//	                                         the caller's uid, gid and groups
//	  Start: request, stdin/out/err  ──►   on a locked thread (fenceThread, c.caller):
//	         (SCM_RIGHTS)                    join the caller's mount (and network)
//	                                         namespace, then unshare a copy
//	                                         the caller's groups and file system ids:
//	                                           resolve the paths, open what stays visible
//	                                         the mounts and loopback, as root
//	                                         bounding set emptied; every id the caller's
//	                                         chdir, Landlock ruleset and restrict, as it
//	                                         fork and exec the command, traced: it
//	                                         stops after its exec to join the caller's
//	                                         cgroups and take its limits, then goes on
//	         ◄──  {"started":true}         wait for it
//	  ctx done ──► {"signal":9}            signal it; a closed connection kills it
//	         ◄──  {"exit":N,"signal":S}
//
// The command runs with the ids the kernel reported for the connection, never ids the
// request names, in the caller's namespaces and cgroups, with its umask and resource
// limits, in a session of its own, and with no capabilities: it may do at most what its
// caller may, less the walls. Every path of the request is resolved and opened with the
// caller's ids, so the daemon's rights reach no path for it. Anyone may connect; a
// caller gets at most fenceServerPerUser commands at once and the daemon
// fenceServerTotal.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// SocketPath returns where a daemon serving its API on apiSocket serves fences:
// beside it, airlock.sock's being airlock-fence.sock.
func SocketPath(apiSocket string) string {
	return strings.TrimSuffix(apiSocket, ".sock") + "-fence.sock"
}

// DaemonUsable says why this host cannot have a daemon put fences up, or nil: the
// command is traced to stop after its exec, which Yama's ptrace_scope 2 and 3 forbid to
// a tracer without capabilities.
func DaemonUsable() error {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return nil // no Yama
	}
	if scope, _ := strconv.Atoi(strings.TrimSpace(string(b))); scope >= 2 {
		return fmt.Errorf("kernel.yama.ptrace_scope is %d: a fenced command cannot be traced to its exec to be given its caller's cgroups and limits", scope)
	}
	return nil
}

// Hides reports whether a fenced command can never reach path, which lies in a
// directory every fence hides. A fence socket anywhere else would let a fenced command
// ask for a looser fence, so a daemon serves one only where this holds.
func Hides(path string) bool {
	return slices.ContainsFunc(fenceHiddenDirs, func(d string) bool { return fenceWithin(path, d) && path != d })
}

const (
	fenceMaxRequest     = 1 << 20          // bytes of one request: argv, environment and paths
	fenceRequestTimeout = 10 * time.Second // to send the request once connected
	fenceReplyTimeout   = 10 * time.Second // for a caller to take one reply
	fenceServerPerUser  = 32               // commands of one uid at once
	fenceServerTotal    = 256              // commands at once
)

// fenceRequest is what a caller asks of the daemon: the fence as the caller resolved it
// (the daemon resolves its paths again as the caller, and finds the homes itself), the
// command, its environment and its absolute working directory.
type fenceRequest struct {
	Spec fenceSpec `json:"spec"`
	Argv []string  `json:"argv"`
	Env  []string  `json:"env"`
	Dir  string    `json:"dir"`
}

// fenceReply is one line the daemon sends: the start (Started, or Error and whether the
// request was at fault), or the end (Exit, and Signal when a signal ended the command).
type fenceReply struct {
	Started bool   `json:"started,omitempty"`
	Error   string `json:"error,omitempty"`
	Invalid bool   `json:"invalid,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
	Signal  int    `json:"signal,omitempty"`
}

// fenceSignalMsg is what a caller sends to signal its command.
type fenceSignalMsg struct {
	Signal int `json:"signal"`
}

func dialFence(path string) (*net.UnixConn, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("fence: no daemon answers on %s: %w", path, err)
	}
	return conn, nil
}

// fenceRemote is a command the daemon started for this process.
type fenceRemote struct {
	conn   *net.UnixConn
	dec    *json.Decoder
	copies sync.WaitGroup
	ours   []*os.File // our ends of the pipes for Stdin, Stdout and Stderr
	stop   func() bool
	mu     sync.Mutex // serialises what is sent
}

// startDaemon sends the request and the command's standard files to the daemon and
// waits for it to say the command started.
func (c *Cmd) startDaemon() (retErr error) {
	defer func() {
		if retErr != nil {
			c.conn.Close()
		}
	}()
	dir := c.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("fence: working directory: %w", err)
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("fence: working directory: %w", err)
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	req := fenceRequest{Spec: c.spec, Argv: c.argv, Env: env, Dir: dir}
	b, err := json.Marshal(&req)
	if err != nil {
		return err
	}
	if len(b) > fenceMaxRequest {
		return errdefs.Invalid("fence: the command, its environment and its paths take %d bytes; the daemon takes at most %d", len(b), fenceMaxRequest)
	}
	r := &fenceRemote{conn: c.conn, dec: json.NewDecoder(bufio.NewReader(c.conn))}
	theirs, copies, err := r.stdio(c)
	defer func() {
		for _, f := range theirs {
			f.Close() // the daemon holds its own copies once they are sent
		}
		if retErr != nil {
			r.closeOurs()
		}
	}()
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	fds := make([]int, len(theirs))
	for i, f := range theirs {
		fds[i] = int(f.Fd())
	}
	// Until the daemon answers, a done context closes the connection (which kills
	// whatever it may have started).
	abort := context.AfterFunc(c.ctx, func() { c.conn.Close() })
	defer abort()
	head := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	_, _, err = c.conn.WriteMsgUnix(head, unix.UnixRights(fds...), nil)
	if err == nil {
		_, err = c.conn.Write(b)
	}
	var rep fenceReply
	if derr := r.dec.Decode(&rep); derr != nil { // a refusal may have come before the request was sent
		if err == nil {
			err = derr
		}
		if cerr := c.ctx.Err(); cerr != nil {
			err = cerr
		}
		return fmt.Errorf("fence: the daemon did not answer: %w", err)
	}
	switch {
	case rep.Exit != nil: // not found or not executable inside the fence; Error says which
		if c.Stderr != nil {
			io.WriteString(c.Stderr, rep.Error)
		}
		c.failed = &ExitError{Code: *rep.Exit}
		r.closeOurs()
		c.conn.Close()
		return nil
	case rep.Error != "" && rep.Invalid:
		return errdefs.Invalid("%s", rep.Error)
	case rep.Error != "":
		return errors.New(rep.Error)
	case !rep.Started:
		return errors.New("fence: the daemon's answer says neither started nor why not")
	}
	for _, fn := range copies {
		r.copies.Go(fn)
	}
	r.stop = context.AfterFunc(c.ctx, func() { r.send(fenceSignalMsg{Signal: int(unix.SIGKILL)}) })
	c.remote = r
	return nil
}

// stdio returns the files to send as the command's standard input, output and error,
// and the copies to run once it started.
func (r *fenceRemote) stdio(c *Cmd) (theirs []*os.File, copies []func(), err error) {
	for i, v := range []any{c.Stdin, c.Stdout, c.Stderr} {
		f, cp, err := r.stdioFile(v, i == 0)
		if err != nil {
			for _, f := range theirs {
				f.Close()
			}
			return nil, nil, err
		}
		theirs = append(theirs, f)
		if cp != nil {
			copies = append(copies, cp)
		}
	}
	return theirs, copies, nil
}

// stdioFile returns what to send for one of c's standard files, v: a copy of it when it
// is a file (closing what was sent never closes the caller's own), /dev/null for nil, else
// the daemon's end of a pipe, with the copy between v and the other end (kept in r.ours).
func (r *fenceRemote) stdioFile(v any, in bool) (*os.File, func(), error) {
	f, isFile := v.(*os.File)
	switch {
	case isFile && f != nil:
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, nil, err
		}
		return os.NewFile(uintptr(fd), f.Name()), nil, nil
	case v == nil || isFile:
		flag := os.O_WRONLY
		if in {
			flag = os.O_RDONLY
		}
		f, err := os.OpenFile(os.DevNull, flag, 0)
		return f, nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	if in {
		r.ours = append(r.ours, pw)
		return pr, func() {
			io.Copy(pw, v.(io.Reader))
			pw.Close()
		}, nil
	}
	r.ours = append(r.ours, pr)
	return pw, func() {
		io.Copy(v.(io.Writer), pr)
		pr.Close()
	}, nil
}

func (r *fenceRemote) closeOurs() {
	for _, f := range r.ours {
		f.Close()
	}
}

func (r *fenceRemote) send(m fenceSignalMsg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(&m)
	r.conn.SetWriteDeadline(time.Now().Add(fenceReplyTimeout))
	r.conn.Write(append(b, '\n'))
}

// wait waits for the daemon to report the command's end, then (for at most delay, when
// not 0) for its output to be copied.
func (r *fenceRemote) wait(delay time.Duration) error {
	var rep fenceReply
	err := r.dec.Decode(&rep)
	r.stop()
	r.conn.Close()
	done := make(chan struct{})
	go func() {
		r.copies.Wait()
		close(done)
	}()
	if delay > 0 {
		select {
		case <-done:
		case <-time.After(delay):
			r.closeOurs()
			<-done
		}
	} else {
		<-done
	}
	switch {
	case err != nil:
		return fmt.Errorf("fence: the daemon went away before the command ended: %w", err)
	case rep.Exit == nil:
		return fmt.Errorf("fence: the daemon did not say how the command ended: %s", rep.Error)
	case rep.Signal != 0:
		return &ExitError{Code: 128 + rep.Signal, Signal: syscall.Signal(rep.Signal)}
	case *rep.Exit != 0:
		return &ExitError{Code: *rep.Exit}
	}
	return nil
}

// fenceCaller is who asked the daemon for a fence, as the kernel reported the peer of
// the connection.
type fenceCaller struct {
	uid, gid uint32
	groups   []uint32
	pid      int32
	pidfd    int    // the calling process, pinned: its namespaces are the command's
	cgroups  string // the caller's /proc/PID/cgroup, read when it connected
	umask    int
	limits   [fenceRlimits]unix.Rlimit // the caller's resource limits
	home     string                    // $HOME of the request's environment
}

// resolve resolves spec's paths as the caller (Fence.resolve) and finds the homes to
// hide: the request's $HOME and the caller's home in the user database.
func (cr *fenceCaller) resolve(spec fenceSpec) (fenceSpec, error) {
	f := Fence{Workspace: spec.Workspace, Access: spec.Access, Scratch: spec.Scratch,
		Network: spec.Network, ExtraRead: spec.ExtraRead, ExtraWrite: spec.ExtraWrite}
	var out fenceSpec
	err := cr.as(func() error {
		var err error
		out, err = f.resolve(fenceHomes(cr.home, int(cr.uid)))
		return err
	})
	return out, err
}

// open opens p (O_PATH) as the caller, never through a /proc magic link: those lead to
// the daemon's own open files and directories (/proc/self/fd/N), past the directories
// above them that the caller may not enter.
func (cr *fenceCaller) open(p string) (fd int, err error) {
	err = cr.as(func() error {
		fd, err = fenceOpenNoMagic(p, unix.O_PATH)
		return err
	})
	return fd, err
}

// fenceOpenNoMagic opens p with flags (and O_CLOEXEC) without following /proc magic links.
func fenceOpenNoMagic(p string, flags int) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_MAGICLINKS})
}

// chdir enters dir, as the caller (the thread has its ids) and never through a /proc
// magic link.
func (cr *fenceCaller) chdir(dir string) error {
	fd, err := fenceOpenNoMagic(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchdir(fd)
}

// as runs fn with the caller's groups and file system ids on this thread, then takes
// root's file system ids back (the groups stay: root needs none).
func (cr *fenceCaller) as(fn func() error) error {
	if err := cr.setGroups(); err != nil {
		return err
	}
	unix.Setfsgid(int(cr.gid))
	unix.Setfsuid(int(cr.uid))
	defer func() {
		unix.Setfsuid(0)
		unix.Setfsgid(0)
	}()
	if got, _ := unix.SetfsuidRetUid(-1); got != int(cr.uid) {
		return fmt.Errorf("fence: file system uid %d, want %d", got, cr.uid)
	}
	return fn()
}

// setGroups sets the calling thread's supplementary groups to the caller's (the raw
// system call: Go's own changes every thread).
func (cr *fenceCaller) setGroups() error {
	var p unsafe.Pointer
	if len(cr.groups) > 0 {
		p = unsafe.Pointer(&cr.groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(cr.groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("fence: setgroups: %w", e)
	}
	return nil
}

// become gives the calling thread the caller's ids for good (its groups are set
// already), which clears its capabilities.
func (cr *fenceCaller) become() error {
	if err := cr.setGroups(); err != nil {
		return err
	}
	g, u := uintptr(cr.gid), uintptr(cr.uid)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, g, g, g); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, u, u, u); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	var r, e, s uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETRESUID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s))); errno != 0 || r != cr.uid || e != cr.uid || s != cr.uid {
		return fmt.Errorf("uids %d/%d/%d after setresuid(%d)", r, e, s, cr.uid)
	}
	return nil
}

// peerCaller reads who is on the other end of conn, and pins its process (the caller
// closes cr.pidfd); readProcess reads the rest once the caller is admitted.
func peerCaller(conn *net.UnixConn) (*fenceCaller, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cr fenceCaller
	var opErr error
	err = raw.Control(func(fd uintptr) {
		uc, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			opErr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		cr.uid, cr.gid, cr.pid = uc.Uid, uc.Gid, uc.Pid
		if cr.groups, opErr = peerGroups(int(fd)); opErr != nil {
			return
		}
		// The process as it connected (Linux 6.5); before, the pid as it is now.
		if cr.pidfd, opErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); opErr != nil {
			cr.pidfd, opErr = unix.PidfdOpen(int(cr.pid), 0)
		}
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return nil, err
	}
	return &cr, nil
}

// fenceRlimits is how many resource limits there are (RLIMIT_NLIMITS).
const fenceRlimits = 16

// readProcess reads what the command takes over from the calling process: its cgroups,
// umask and resource limits. It then checks the pidfd still names a live process, so
// the pid was not another's meanwhile.
func (cr *fenceCaller) readProcess() error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cr.pid))
	if err != nil {
		return fmt.Errorf("the caller's cgroups: %w", err)
	}
	cr.cgroups = string(b)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cr.pid))
	if err != nil {
		return fmt.Errorf("the caller's status: %w", err)
	}
	cr.umask = -1
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if u, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil && u <= 0o777 {
				cr.umask = int(u)
			}
		}
	}
	if cr.umask < 0 {
		return errors.New("the caller's umask is not in its /proc/PID/status")
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cr.pid))
	if err != nil {
		return fmt.Errorf("the caller's resource limits: %w", err)
	}
	if cr.limits, err = parseLimits(string(limits)); err != nil {
		return fmt.Errorf("the caller's resource limits: %w", err)
	}
	if err := unix.PidfdSendSignal(cr.pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("the calling process (pid %d) is gone: %w", cr.pid, err)
	}
	return nil
}

// parseLimits reads the text of /proc/PID/limits: a header, then one line a resource
// in the order of their numbers, the name in the first 26 columns, then the soft and
// the hard limit ("unlimited" or a number) and the unit.
func parseLimits(text string) ([fenceRlimits]unix.Rlimit, error) {
	var out [fenceRlimits]unix.Rlimit
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) < fenceRlimits+1 {
		return out, fmt.Errorf("%d lines, want %d", len(lines), fenceRlimits+1)
	}
	value := func(s string) (uint64, error) {
		if s == "unlimited" {
			return unix.RLIM_INFINITY, nil
		}
		return strconv.ParseUint(s, 10, 64)
	}
	for r := range out {
		line := lines[r+1]
		if len(line) < 26 {
			return out, fmt.Errorf("line %q", line)
		}
		f := strings.Fields(line[26:])
		if len(f) < 2 {
			return out, fmt.Errorf("line %q", line)
		}
		soft, err1 := value(f[0])
		hard, err2 := value(f[1])
		if err1 != nil || err2 != nil || soft > hard {
			return out, fmt.Errorf("line %q", line)
		}
		out[r] = unix.Rlimit{Cur: soft, Max: hard}
	}
	return out, nil
}

// limit lowers the resource limits of pid, which has the calling thread's ids, to the
// caller's where the caller's are lower: the command gets at most the caller's limits,
// never the daemon's when they are higher. (Raising one needs CAP_SYS_RESOURCE, which
// the daemon may not hold; a limit the daemon has lower than the caller stays so.)
func (cr *fenceCaller) limit(pid int) error {
	for r, want := range cr.limits {
		var have unix.Rlimit
		if err := unix.Prlimit(pid, r, nil, &have); err != nil {
			return fmt.Errorf("resource limit %d: %w", r, err)
		}
		next := unix.Rlimit{Cur: min(have.Cur, want.Cur), Max: min(have.Max, want.Max)}
		next.Cur = min(next.Cur, next.Max)
		if next == have {
			continue
		}
		if err := unix.Prlimit(pid, r, &next, nil); err != nil {
			return fmt.Errorf("resource limit %d: %w", r, err)
		}
	}
	return nil
}

// enterNamespaces puts the calling thread into the caller's mount namespace, and its
// network namespace when the command may use the network: the command then sees the
// files (and network) its caller sees, and never the daemon's.
func (cr *fenceCaller) enterNamespaces(network bool) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil { // a mount namespace is joined by a thread with its own root and cwd
		return err
	}
	flags := unix.CLONE_NEWNS
	if network {
		flags |= unix.CLONE_NEWNET
	}
	return unix.Setns(cr.pidfd, flags)
}

// fenceCgroupRoot is where the host's cgroup hierarchies are mounted.
const fenceCgroupRoot = "/sys/fs/cgroup"

// fenceCgroupDirs returns the directories of the cgroups that procCgroup (the text of
// /proc/PID/cgroup, read in the host's cgroup namespace) names under root: the unified
// hierarchy's at root itself (cgroup v2) or at root/unified (hybrid), each v1
// hierarchy's at root/CONTROLLERS or, failing that, root/CONTROLLER.
func fenceCgroupDirs(root, procCgroup string) ([]string, error) {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	v2 := err == nil
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !filepath.IsAbs(parts[2]) || filepath.Clean(parts[2]) != parts[2] {
			return nil, fmt.Errorf("a line of /proc/PID/cgroup that is not id:controllers:/path: %q", line)
		}
		var candidates []string
		switch {
		case parts[1] == "" && v2:
			candidates = []string{root}
		case parts[1] == "":
			candidates = []string{filepath.Join(root, "unified")}
		case v2:
			continue // a v1 hierarchy beside v2 that this host does not mount here
		default:
			candidates = []string{filepath.Join(root, strings.TrimPrefix(parts[1], "name="))}
			for _, c := range strings.Split(parts[1], ",") {
				candidates = append(candidates, filepath.Join(root, strings.TrimPrefix(c, "name=")))
			}
		}
		for _, c := range candidates {
			if fi, err := os.Stat(c); err == nil && fi.IsDir() {
				dirs = append(dirs, filepath.Join(c, parts[2]))
				break
			}
		}
	}
	return dirs, nil
}

// openCgroups opens, for writing, the cgroup.procs file of each of the caller's cgroups.
// It runs as root, before the fence thread takes the caller's ids: the kernel checks a
// migration against the credentials the file was opened with (Linux 5.16 and later).
func (cr *fenceCaller) openCgroups() ([]*os.File, error) {
	dirs, err := fenceCgroupDirs(fenceCgroupRoot, cr.cgroups)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue // an empty hierarchy (the hybrid unified one) the caller is at the root of, or gone
		}
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// settle waits for the command pid, which the calling thread traces, to stop after its
// exec, moves it into the caller's cgroups (procs, from openCgroups), gives it the
// caller's resource limits, and lets it go: it runs no instruction of its own before
// it counts against the caller's limits and never the daemon's.
func (cr *fenceCaller) settle(pid int, procs []*os.File) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) { // the Go runtime's own signals interrupt it
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the command to stop after its exec: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		return fmt.Errorf("the command ended (%v) before it could be given the caller's limits", ws)
	}
	for _, f := range procs {
		if _, err := f.WriteString(strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("move the command into the caller's cgroup %s: %w", filepath.Dir(f.Name()), err)
		}
	}
	// From this thread, which has the command's ids, so no capability is needed.
	if err := cr.limit(pid); err != nil {
		return fmt.Errorf("give the command the caller's limits: %w", err)
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fmt.Errorf("let the command go: %w", err)
	}
	return nil
}

// peerGroups reads the supplementary groups of fd's peer (SO_PEERGROUPS).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == 0:
			return buf[:n/4], nil
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 1<<16:
			buf = make([]uint32, n/4)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}

// Server puts fences up for the callers of its socket (WayDaemon). It needs the
// capabilities of WayThread.
type Server struct {
	Log *slog.Logger

	mu      sync.Mutex
	users   map[uint32]int
	total   int
	running map[*Cmd]struct{}
	closed  bool
	conns   sync.WaitGroup
}

// Serve accepts connections on l until l is closed. Anyone may connect: a fence runs a
// command with its caller's own ids. A failed accept (out of descriptors, say) is
// retried after a pause, as net/http does: callers cannot stop it.
func (s *Server) Serve(l *net.UnixListener) error {
	var pause time.Duration
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.log().Warn("fence socket: accept failed; retrying", "err", err, "in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		s.conns.Go(func() { s.serveConn(conn) })
	}
}

// Close kills the commands still running and waits for their connections to end; the
// caller closes the listener first.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.running {
		c.cmd.Process.Kill()
	}
	s.mu.Unlock()
	s.conns.Wait()
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// admit counts one more command for uid, or says why not.
func (s *Server) admit(uid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errdefs.Unavailable("fence: the daemon is stopping")
	case s.users[uid] >= fenceServerPerUser:
		return errdefs.Unavailable("fence: uid %d has %d fenced commands running, the most the daemon runs for one user at once", uid, fenceServerPerUser)
	case s.total >= fenceServerTotal:
		return errdefs.Unavailable("fence: the daemon runs %d fenced commands, the most it runs at once", fenceServerTotal)
	}
	if s.users == nil {
		s.users = map[uint32]int{}
	}
	s.users[uid]++
	s.total++
	return nil
}

func (s *Server) release(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[uid]--; s.users[uid] == 0 {
		delete(s.users, uid)
	}
	s.total--
}

// track records c as running, unless the server is closing.
func (s *Server) track(c *Cmd, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		delete(s.running, c)
		return true
	}
	if s.closed {
		return false
	}
	if s.running == nil {
		s.running = map[*Cmd]struct{}{}
	}
	s.running[c] = struct{}{}
	return true
}

func (s *Server) serveConn(conn *net.UnixConn) {
	defer conn.Close()
	reply := func(rep fenceReply) error {
		b, _ := json.Marshal(&rep)
		conn.SetWriteDeadline(time.Now().Add(fenceReplyTimeout))
		_, err := conn.Write(append(b, '\n'))
		return err
	}
	refuse := func(err error) {
		reply(fenceReply{Error: err.Error(), Invalid: errors.Is(err, errdefs.ErrInvalidArgument)})
	}
	cr, err := peerCaller(conn)
	if err != nil {
		refuse(fmt.Errorf("fence: who is calling: %w", err))
		return
	}
	defer unix.Close(cr.pidfd)
	if err := s.admit(cr.uid); err != nil {
		refuse(err)
		return
	}
	defer s.release(cr.uid)
	if err := cr.readProcess(); err != nil {
		refuse(fmt.Errorf("fence: who is calling: %w", err))
		return
	}
	conn.SetReadDeadline(time.Now().Add(fenceRequestTimeout))
	req, files, err := readFenceRequest(conn)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		refuse(err)
		return
	}
	conn.SetReadDeadline(time.Time{})
	c, err := newCallerCmd(req, cr, files)
	if err != nil {
		refuse(err)
		return
	}
	if err := c.startThread(); err != nil {
		s.log().Info("fence refused", "uid", cr.uid, "pid", cr.pid, "command", req.Argv[0], "err", err)
		refuse(err)
		return
	}
	for _, f := range files {
		f.Close() // the command has its own
	}
	files = nil
	if c.failed != nil {
		reply(fenceReply{Exit: &c.failed.Code, Error: c.failedMsg.String()})
		return
	}
	if !s.track(c, true) {
		c.cmd.Process.Kill()
	}
	defer s.track(c, false)
	s.log().Info("fenced command", "uid", cr.uid, "pid", cr.pid, "command", req.Argv[0], "child", c.cmd.Process.Pid)
	reply(fenceReply{Started: true})
	// The caller may signal its command; when it goes away, the command goes too.
	go func() {
		dec := json.NewDecoder(io.LimitReader(conn, fenceMaxRequest))
		for {
			var m fenceSignalMsg
			if err := dec.Decode(&m); err != nil {
				c.cmd.Process.Kill()
				return
			}
			if sig := syscall.Signal(m.Signal); sig > 0 && sig < 32 {
				c.cmd.Process.Signal(sig)
			}
		}
	}()
	err = c.cmd.Wait()
	code, sig := 0, 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = int(ws.Signal())
		}
	} else if err != nil {
		reply(fenceReply{Error: "fence: " + err.Error()})
		return
	}
	reply(fenceReply{Exit: &code, Signal: sig})
	conn.CloseRead() // ends the signal reader
}

// readFenceRequest reads one request and the three files sent with it.
func readFenceRequest(conn *net.UnixConn) (fenceRequest, []*os.File, error) {
	var req fenceRequest
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for one more than three, to notice it
	n, oobn, flags, _, err := conn.ReadMsgUnix(head, oob)
	var files []*os.File
	if err == nil && oobn > 0 {
		files, err = fenceFiles(oob[:oobn])
	}
	if err != nil {
		return req, files, fmt.Errorf("fence: read the request: %w", err)
	}
	if flags&unix.MSG_CTRUNC != 0 || len(files) != 3 {
		return req, files, errdefs.Invalid("fence: a request comes with three files (standard input, output and error), not %d", len(files))
	}
	if n < len(head) {
		if _, err := io.ReadFull(conn, head[n:]); err != nil {
			return req, files, fmt.Errorf("fence: read the request: %w", err)
		}
	}
	size := binary.BigEndian.Uint32(head)
	if size > fenceMaxRequest {
		return req, files, errdefs.Invalid("fence: a request of %d bytes; at most %d", size, fenceMaxRequest)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(conn, b); err != nil {
		return req, files, fmt.Errorf("fence: read the request: %w", err)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return req, files, errdefs.Invalid("fence: the request is not valid JSON: %v", err)
	}
	return req, files, nil
}

// fenceFiles returns the descriptors of the SCM_RIGHTS messages in oob as files.
func fenceFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds { // received close-on-exec (MSG_CMSG_CLOEXEC): no other command inherits them
			files = append(files, os.NewFile(uintptr(fd), "fence-stdio"))
		}
	}
	return files, nil
}

// newCallerCmd checks req and makes the command that WayThread starts for cr.
func newCallerCmd(req fenceRequest, cr *fenceCaller, files []*os.File) (*Cmd, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, errdefs.Invalid("fence: empty command")
	}
	if !filepath.IsAbs(req.Dir) {
		return nil, errdefs.Invalid("fence: the working directory %q is not an absolute path", req.Dir)
	}
	spec := req.Spec
	spec.Homes, spec.Resolv = nil, "" // the daemon finds these for the caller
	paths := append([]string{spec.Workspace, spec.Scratch}, spec.ExtraRead...)
	for _, p := range append(paths, spec.ExtraWrite...) {
		if p != "" && !filepath.IsAbs(p) {
			return nil, errdefs.Invalid("fence: %q is not an absolute path", p)
		}
	}
	for _, kv := range req.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "HOME" {
			cr.home = v // the last one, as exec keeps
		}
	}
	abi, err := fenceABI()
	if err != nil {
		return nil, err
	}
	env := req.Env
	if env == nil {
		env = []string{} // never the daemon's own
	}
	return &Cmd{ctx: context.Background(), argv: slices.Clone(req.Argv), spec: spec, abi: abi,
		way: WayThread, caller: cr, Env: env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2]}, nil
}
