package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/sandboxlink"
)

// The channel to a sandbox's agent. The daemon makes the agent's socket itself, in
// <dir>/ctl: a root-only directory that is never mounted into the sandbox, so sandbox
// code can neither see its path nor put anything in its place. The container inherits
// the bound socket (fd 4) and the agent only calls listen(2) on it. Every connection is
// then checked against the credentials the kernel recorded at that listen: the peer must
// be the container's init process (the agent) running as the sandbox's root uid.

// agentFD is the descriptor number of the agent's socket inside the container (runc
// passes inherited descriptors from 3 on; 3 is the ready pipe).
const agentFD = 4

// agentPeer is who must be listening on a sandbox's agent socket.
type agentPeer struct {
	UID uint32 `json:"uid"` // host uid of the sandbox's root
	PID int    `json:"pid"` // host pid of the container's init (the agent)
}

func (d *Driver) ctlDir(id string) string { return filepath.Join(d.dir(id), "ctl") }

// bindAgentSocket makes the ctl directory and a unix socket bound in it, not yet
// listening. The caller passes it to the container and closes its own copy.
func (d *Driver) bindAgentSocket(id string) (*os.File, error) {
	ctl := d.ctlDir(id)
	if err := os.RemoveAll(ctl); err != nil {
		return nil, err
	}
	if err := os.Mkdir(ctl, 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(ctl, "agent.sock")}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind agent socket: %w", err)
	}
	return os.NewFile(uintptr(fd), "agent.sock"), nil
}

// recordPeer notes the agent the daemon expects behind the socket, on disk (read back
// after a daemon restart) and in memory: the container's init as the sandbox's root, or
// with an engine that has its own kernel, the broker as host root.
func (d *Driver) recordPeer(id string, uid uint32) error {
	pid, err := readPid(filepath.Join(d.ctlDir(id), "init.pid"))
	if err != nil {
		return fmt.Errorf("container init pid: %w", err)
	}
	p := agentPeer{UID: uid, PID: pid}
	if d.opts.Engine.Sentry {
		// init is the sandbox's kernel: its score stays, so the OOM killer ends the
		// sandbox rather than the host's processes.
		if p.PID, err = readPid(filepath.Join(d.ctlDir(id), "broker.pid")); err != nil {
			return fmt.Errorf("agent broker pid: %w", err)
		}
		p.UID = 0
	} else {
		// When sandbox code exhausts the sandbox's memory, the kernel must end that
		// code, never the agent. The agent gives every process it starts the highest
		// OOM score; where the daemon holds CAP_SYS_RESOURCE it also gives the agent
		// the lowest (only the host can lower a score: runc sets its own from inside
		// the user namespace). Without it the agent keeps the ordinary score, still
		// far below its children's.
		os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("-1000"), 0)
	}
	data, _ := json.Marshal(p)
	if err := os.WriteFile(filepath.Join(d.ctlDir(id), "peer.json"), data, 0o600); err != nil {
		return err
	}
	d.dropKept(id)
	d.peers.Store(id, p)
	return nil
}

// readPid reads a pid file.
func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid file %s: %q", path, b)
	}
	return pid, nil
}

func (d *Driver) peer(id string) (agentPeer, error) {
	if p, ok := d.peers.Load(id); ok {
		return p.(agentPeer), nil
	}
	var p agentPeer
	b, err := os.ReadFile(filepath.Join(d.ctlDir(id), "peer.json"))
	if err != nil {
		return p, fmt.Errorf("sandbox %s has no agent channel: %w", id, err)
	}
	if err := json.Unmarshal(b, &p); err != nil || p.PID <= 0 {
		return p, fmt.Errorf("sandbox %s: damaged agent record", id)
	}
	d.peers.Store(id, p)
	return p, nil
}

// keptConns is the pool of a container's kept agent connections: its connections were
// all dialled to, and checked against, peer.
type keptConns struct {
	peer agentPeer
	pool *agent.Pool
}

// DialAgent implements runtime.Driver. A connection an earlier call ended cleanly on is
// used again (see agent.Pool): it was checked at its dial, its peer cannot change, and
// the pool it comes from belongs to the container that agent runs in. The pool is
// dropped with every change of the container (recordPeer, Stop) and whenever the
// expected peer is another.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	want, err := d.peer(id)
	if err != nil {
		return nil, err
	}
	pool := d.keptPool(id, want)
	if pool == nil {
		return d.dialAgent(ctx, id, want)
	}
	return pool.Dial(ctx)
}

// keptPool returns the pool of id's agent connections when that agent is want, making
// it if need be, or nil when the container changed meanwhile.
func (d *Driver) keptPool(id string, want agentPeer) *agent.Pool {
	if v, ok := d.kept.Load(id); ok && v.(*keptConns).peer == want {
		return v.(*keptConns).pool
	}
	k := &keptConns{peer: want, pool: agent.NewPool(func(ctx context.Context) (net.Conn, error) { return d.dialAgent(ctx, id, want) })}
	if old, loaded := d.kept.Swap(id, k); loaded {
		old.(*keptConns).pool.Close()
	}
	// A Stop (or a new start) between the peer's read and the Swap dropped the pools
	// before this one was put in: take it out again rather than keep it for a
	// container that is gone (the caller dials without keeping).
	if now, ok := d.peers.Load(id); !ok || now.(agentPeer) != want {
		if d.kept.CompareAndDelete(id, k) {
			k.pool.Close()
		}
		return nil
	}
	return k.pool
}

// primeAgent dials id's new agent in the background, once it said it was ready, and
// keeps the connection for the first call (agent.Pool.Prime): that call, most often
// the exec that follows a create, then skips the dial and the agent's accept. The
// connection is checked like any other, and belongs to the pool of this container.
// Not for an engine that checkpoints: a connection that reached the agent after a
// checkpoint had it close its connections (quiesce) could not be saved.
func (d *Driver) primeAgent(id string) {
	if d.opts.Engine.Checkpoint {
		return
	}
	want, err := d.peer(id)
	if err != nil {
		return
	}
	go func() {
		if pool := d.keptPool(id, want); pool != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pool.Prime(ctx); err != nil {
				d.log.Debug("dial agent ahead", "sandbox", id, "err", err)
			}
		}
	}()
}

// dropKept closes the kept agent connections of id's container.
func (d *Driver) dropKept(id string) {
	if old, ok := d.kept.LoadAndDelete(id); ok {
		old.(*keptConns).pool.Close()
	}
}

// dialAgent dials id's agent. The socket is opened without following links and the
// connection kept only when its peer is want, the sandbox's own agent.
func (d *Driver) dialAgent(ctx context.Context, id string, want agentPeer) (net.Conn, error) {
	dirfd, err := unix.Open(d.ctlDir(id), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent channel of %s: %w", id, err)
	}
	defer unix.Close(dirfd)
	sfd, err := unix.Openat(dirfd, "agent.sock", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent channel of %s: %w", id, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != 0 {
		return nil, fmt.Errorf("agent channel of %s: not the daemon's socket", id)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(sfd))
	if err != nil {
		return nil, err
	}
	if err := checkPeer(c, want); err != nil {
		c.Close()
		return nil, fmt.Errorf("agent channel of %s: %w", id, err)
	}
	return c, nil
}

// errWrongPeer is returned when something other than the sandbox's agent answers.
var errWrongPeer = errors.New("the peer is not the sandbox's agent")

func checkPeer(c net.Conn, want agentPeer) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errWrongPeer
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if cred.Uid != want.UID || int(cred.Pid) != want.PID {
		return fmt.Errorf("%w (pid %d uid %d, want pid %d uid %d)", errWrongPeer, cred.Pid, cred.Uid, want.PID, want.UID)
	}
	return nil
}

// DialPort implements runtime.PortDialer, on the sandbox's loopback (so a server bound
// to 127.0.0.1 inside is reached). Under runc the daemon dials from inside the
// container's network namespace, entered through a pidfd of its init (pinned: a pid
// reused since, or a process outside the sandbox's cgroup, is refused). An engine with
// its own kernel keeps its network stack there, so its agent dials and carries the
// bytes.
func (d *Driver) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if d.opts.Engine.Sentry {
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
		return cl.DialPort(ctx, port)
	}
	pidfd, _, err := d.initPidfd(id)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pidfd)
	c, err := sandboxlink.DialIn(ctx, pidfd, addr)
	if err != nil {
		return nil, fmt.Errorf("nothing answered on port %d in the sandbox: %w", port, err)
	}
	return c, nil
}
