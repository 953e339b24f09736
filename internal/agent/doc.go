// Package agent owns the in-sandbox agent — the process that runs as PID 1 inside every
// sandbox — speaking the wire protocol of internal/agentproto: checksummed frames over a
// unix socket, one connection per call. The agent reaps zombies, enforces the sandbox's
// deadline on its own clock and serves exec, PTYs, sessions, a table of processes that
// outlive the calls that start and watch them (proc.*), file operations (confined to
// its root with openat2), directory watches (inotify) and user lookups.
// Client is the host side the daemon uses. The package must not touch the daemon's state,
// the store, images or the runtime driver: it knows only its socket, its root and the
// processes it started.
//
// Hostile surface of the Client: everything an agent sends may come from sandbox code
// that replaced it. A frame is at most MaxPayload and checksummed, a single-frame reply
// has a deadline, an exec with a timeout must end soon after it, and a call that does not
// stream to a client reads at most Client.MaxRead bytes of output before it stops the
// command.
package agent

// copyBuf is the size of every copy buffer in the package.
const copyBuf = 32 << 10
