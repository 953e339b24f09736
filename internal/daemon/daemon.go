// Package daemon owns the assembly of one Airlock node: Assemble builds every part from
// the typed configuration (the store and the image store, the agent binary, the runtime
// drivers, the manager, identities, the audit chain, secrets, sandbox networking, the
// HTTP API and the E2B plane), for `airlock serve` and for the tests' nodes alike; Run
// checks the host, assembles, listens on the unix socket (and TCP when configured), and
// shuts down cleanly without stopping sandboxes. It holds no rules of its own.
//
// Hostile surface it guards: the state directory and the files in it, against other
// host users and sandboxes' uids. The daemon runs with umask 066 and sets the modes of
// what it finds at start (see perms.go): nothing there is readable by others but the
// files sandboxes read on purpose.
package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/version"
	"golang.org/x/sys/unix"
)

// Run serves until ctx ends. Sandboxes keep running after it returns.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	set, err := cfg.Settings()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("airlock serve must run as root (it manages containers, mounts and cgroups)")
	}
	unix.Umask(stateUmask)
	if failpoint.ArmFromEnv(); failpoint.Armed() != nil {
		log.Warn("crash points are armed: the daemon kills itself when it reaches them", "points", failpoint.Armed(), "env", failpoint.EnvVar)
	}
	if set.MemoryTarget > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(set.MemoryTarget)
	}
	if err := trustedDir(cfg.StateDir, 0o711, "state_dir"); err != nil {
		return err
	}
	if err := traversable(cfg.StateDir); err != nil {
		return err
	}
	// One daemon per state directory: a second one's recovery would reconcile the
	// first's sandboxes under it.
	stateLock, err := lockFile(filepath.Join(cfg.StateDir, sweep.LockName), "state directory "+cfg.StateDir)
	if err != nil {
		return err
	}
	defer stateLock.Close()
	if err := secureStateDir(cfg.StateDir); err != nil {
		return fmt.Errorf("set the modes of the state directory %s: %w", cfg.StateDir, err)
	}
	// The socket's directory is checked, locked and the socket found not served now,
	// before recovery touches anything.
	sockLock, err := claimSocket(cfg.Socket)
	if err != nil {
		return err
	}
	defer sockLock.Close()
	hostLocks, err := lockHostNames(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range hostLocks {
			f.Close()
		}
	}()
	for _, f := range append([]string{cfg.RolesFile, cfg.Runc}, cfg.Network.ExtraCAs...) {
		if f != "" {
			if err := TrustedFile(f, "configured file"); err != nil {
				return err
			}
		}
	}
	if cfg.Runsc != "" && cfg.Runsc != "off" {
		if err := TrustedFile(cfg.Runsc, "runsc"); err != nil {
			return err
		}
	}
	// The daemon runs runc as root for every sandbox: one found on PATH must be as
	// trusted as a configured one.
	if cfg.Runc == "" {
		if p, err := exec.LookPath("runc"); err == nil {
			if err := TrustedFile(p, "runc found on PATH"); err != nil {
				return fmt.Errorf("%w; or set runc: in the configuration to a root-owned binary", err)
			}
			cfg.Runc = p
		}
	}
	// What this node makes on the host, recorded before any of it is made: `airlock gc
	// --state-dir` finds it there once the daemon is gone.
	if err := sweep.WriteRecord(cfg.StateDir, hostRecord(cfg)); err != nil {
		return fmt.Errorf("record the host names of %s: %w", cfg.StateDir, err)
	}
	var certs *certFiles
	if cfg.TLSCert != "" {
		if certs, err = openCertFiles(cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return err
		}
	}
	// secret.NewDelivery mounts a tmpfs on it: it must be a directory no one else can
	// point elsewhere.
	if err := trustedDir(cfg.SecretsDir, 0o700, "secrets_dir"); err != nil {
		return err
	}
	node, err := Assemble(ctx, cfg, Options{Log: log})
	if err != nil {
		return err
	}
	defer node.Close()
	return serve(ctx, cfg, node, certs, log)
}

// serve serves node on the listeners cfg names (the unix socket, the fence socket,
// listen and e2b_listen) until ctx ends or one fails.
func serve(ctx context.Context, cfg config.Config, node *Node, certs *certFiles, log *slog.Logger) (retErr error) {
	hs := node.APIServer()
	ul, err := listenUnix(cfg.Socket, 0o660)
	if err != nil {
		return err
	}
	defer os.Remove(cfg.Socket) // on every way out, the lock still held
	errc := make(chan error, 5)
	go func() { errc <- hs.Serve(ul) }()
	fencePath := node.FenceSocket
	if node.FenceNote == "" { // the fence socket, as Assemble decided
		fl, err := listenUnix(fencePath, 0o666) // anyone: a fence runs a command with its caller's ids
		if err != nil {
			hs.Close()
			return fmt.Errorf("fence socket: %w", err)
		}
		fences := &fence.Server{Log: log}
		go func() { errc <- fences.Serve(fl.(*net.UnixListener)) }()
		defer func() {
			fl.Close()
			fences.Close()
			os.Remove(fencePath)
		}()
	} else {
		log.Info("no fence socket: `airlock fence` run by users other than root starts itself again instead", "why", node.FenceNote)
	}
	if cfg.Listen != "" {
		tl, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			hs.Close()
			return err
		}
		// A server of its own: one http.Server serving plain HTTP on the socket first
		// answers HTTP/2 over TLS with a closed connection.
		ts := &http.Server{Handler: node.Handler(), ReadHeaderTimeout: hs.ReadHeaderTimeout, ErrorLog: hs.ErrorLog}
		if certs != nil {
			ts.TLSConfig = certs.config()
		}
		go func() { errc <- serveTCP(ts, tl) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ts.Shutdown(sctx)
		}()
		log.Info("listening", "tcp", tl.Addr().String(), "tls", certs != nil)
		if certs == nil {
			warnPlainHTTP(log, "listen", tl.Addr())
		}
	}
	if node.E2B != nil {
		el, err := net.Listen("tcp", cfg.E2BListen)
		if err != nil {
			hs.Close()
			return fmt.Errorf("e2b_listen: %w", err)
		}
		es := &http.Server{Handler: node.E2B,
			ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		// HTTP/2 without TLS too: the SDKs' streaming input needs it.
		es.Protocols = new(http.Protocols)
		es.Protocols.SetHTTP1(true)
		es.Protocols.SetUnencryptedHTTP2(true)
		if certs != nil {
			es.Protocols.SetHTTP2(true)
			es.TLSConfig = certs.config()
		} else {
			warnPlainHTTP(log, "e2b_listen", el.Addr())
		}
		go func() { errc <- serveTCP(es, el) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			es.Shutdown(sctx)
		}()
		log.Info("listening", "e2b", el.Addr().String(), "tls", certs != nil)
	}
	if cs := node.ClusterServer(); cs != nil && cfg.Node.Listen != "" {
		nl, err := net.Listen("tcp", cfg.Node.Listen)
		if err != nil {
			hs.Close()
			return fmt.Errorf("node.listen: %w", err)
		}
		go func() { errc <- cs.ServeTLS(nl, "", "") }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs.Shutdown(sctx)
		}()
		log.Info("listening", "node", nl.Addr().String(), "mtls", true)
	} else if cfg.Node.Listen != "" {
		log.Warn("node.listen is set but the node holds no cluster certificate: it serves no other node, and forwards no call", "node_listen", cfg.Node.Listen)
	}
	log.Info("airlock serving", "socket", cfg.Socket, "state_dir", cfg.StateDir, "store", fmt.Sprint(node.Store), "version", version.String())
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			retErr = err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	log.Info("airlock stopped; sandboxes keep running")
	return retErr
}

// hostRecord names what a node with cfg makes on the host (cfg.Runc resolved): its
// cgroup parents, runtimes' state roots, nftables table, veth prefix and secrets tmpfs.
func hostRecord(cfg config.Config) sweep.Record {
	runc := cfg.Runc
	if runc == "" {
		runc = "runc"
	}
	r := sweep.Record{CgroupParents: []string{cfg.CgroupParent, cfg.CgroupParent + "-runsc"},
		Runtimes:   []sweep.Runtime{{Binary: runc, Root: filepath.Join(cfg.StateDir, "runc")}},
		SecretsDir: filepath.Clean(cfg.SecretsDir)}
	if cfg.Runsc != "off" {
		runsc := cfg.Runsc
		if runsc == "" {
			runsc = "runsc"
			if p, ok := gvisor.Find(); ok {
				runsc = p
			}
		}
		r.Runtimes = append(r.Runtimes, sweep.Runtime{Binary: runsc, Root: filepath.Join(cfg.StateDir, "runsc")})
	}
	if cfg.Network.Enabled {
		r.Table, r.VethPrefix = cfg.Network.Table, cfg.Network.HostPrefix
	}
	return r
}

// claimSocket readies the socket's directory (root's, writable by root alone: in one
// others may write to, they could put their own socket or a link in the socket's place
// and have root chmod what it names) and locks the socket's name for this daemon, so
// that no second daemon removes the socket this one serves on. It refuses a socket
// another daemon (one that took no lock) serves on.
func claimSocket(path string) (*os.File, error) {
	if err := trustedDir(filepath.Dir(path), 0o755, "the socket's directory"); err != nil {
		return nil, err
	}
	lock, err := lockFile(path+".lock", "socket "+path)
	if err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		lock.Close()
		return nil, fmt.Errorf("another daemon is already serving on %s", path)
	}
	return lock, nil
}

// listenUnix listens on path, replacing a stale socket, and gives it mode; the caller
// holds the socket's lock (claimSocket).
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// traversable checks that every directory from / to dir lets others search it: each
// sandbox's root user is an unprivileged host uid that runc must reach its root through.
func traversable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("state directory %s is not reachable by sandboxes: %s has mode %v; allow search by others (chmod o+x %s)", abs, p, fi.Mode().Perm(), p)
		}
		if p == "/" {
			return nil
		}
	}
}

// fenceCheck reports the host fence (airlock fence, the router's host route): Landlock,
// and how users other than root get one — the daemon's fence socket, or, where note says
// why there is none, the binary starting again.
func fenceCheck(socket, note string) runtime.Check {
	c := runtime.Check{Name: "host fence", Optional: true}
	abi, err := fence.LandlockABI()
	if err != nil {
		c.Detail, c.Degrades = err.Error(), "airlock fence and the router's host route refuse to run commands"
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("Landlock ABI %d; for users other than root, the daemon's fence socket %s", abi, socket)
	if note != "" {
		c.Detail = fmt.Sprintf("Landlock ABI %d; users other than root start airlock again in a user namespace (no fence socket: %s)", abi, note)
	}
	return c
}

// openAuth starts the node's authentication: on the first start it creates the
// administrator and says where its token is; the configuration's old tokens: list keeps
// working, with a warning naming what replaces it.
func openAuth(ctx context.Context, cfg config.Config, st store.Store, log *slog.Logger) (*auth.Service, error) {
	unixUsers := map[int]string{0: config.LocalOwner}
	for uid, name := range cfg.UnixUsers {
		unixUsers[uid] = name
	}
	a := auth.New(st, auth.Options{UnixUsers: unixUsers, Admin: config.LocalOwner, Log: log})
	if cfg.RolesFile != "" {
		if err := a.LoadRolesFile(ctx, cfg.RolesFile); err != nil {
			return nil, err
		}
	}
	path, err := a.Bootstrap(ctx, cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("create the administrator: %w", err)
	}
	if path != "" {
		log.Warn("created the administrator identity " + config.LocalOwner + "; its API token is in " + path +
			" (root on this host is it over the unix socket)")
	}
	for _, t := range cfg.Tokens {
		if err := a.AddStaticToken(ctx, t.Token, t.Owner); err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
	}
	if len(cfg.Tokens) > 0 {
		log.Warn("the tokens: list of the configuration file is deprecated: its owners are now service accounts with the developer role; make tokens with `airlock token create` and remove the list")
	}
	return a, nil
}

// pruneAuditLog keeps the audit log within maxAge (0: no age limit) and maxRecords,
// every minute: sandboxes and unauthenticated callers add records at their own pace.
func pruneAuditLog(ctx context.Context, chain *audit.Chain, maxAge time.Duration, maxRecords int64, log *slog.Logger) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		var before time.Time
		if maxAge > 0 {
			before = time.Now().Add(-maxAge)
		}
		if err := chain.Prune(ctx, before, maxRecords); err != nil && ctx.Err() == nil {
			log.Error("prune the audit log", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// keysDir is where the node's keys are: cluster.keys_dir, shared by the nodes of a
// cluster, or the state directory. A shared directory must exist and be closed to every
// user but its owner, and so must each key file in it, as tls_key must.
func keysDir(cfg config.Config) (string, error) {
	dir := cfg.Cluster.KeysDir
	if dir == "" {
		return cfg.StateDir, nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("cluster.keys_dir: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("cluster.keys_dir %s is not a directory", dir)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		return "", fmt.Errorf("cluster.keys_dir %s has mode %o: users other than root may read the keys (chmod 700 %s)", dir, mode, dir)
	}
	for _, name := range []string{"audit.key", "secret.key", "e2b-token.key"} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the first node makes it
		}
		if err != nil {
			return "", fmt.Errorf("cluster.keys_dir: %w", err)
		}
		if mode := fi.Mode().Perm(); mode&0o077 != 0 {
			return "", fmt.Errorf("key %s has mode %o: users other than root may read it (chmod 600 %s)", p, mode, p)
		}
	}
	return dir, nil
}

// e2bTokenKey is the node's key for the E2B-compatible plane's sandbox access tokens:
// 32 random bytes in the state directory, made on first use, so tokens stay valid
// across restarts.
func e2bTokenKey(stateDir string) ([]byte, error) {
	path := filepath.Join(stateDir, "e2b-token.key")
	key, err := os.ReadFile(path)
	if err == nil && len(key) == 32 {
		return key, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("e2b token key: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := durable.WriteFile(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("e2b token key: %w", err)
	}
	return key, nil
}

// warnPlainHTTP warns when a plain-HTTP listener is reachable from other machines: the
// tokens and API keys clients send to it cross the network in the clear.
func warnPlainHTTP(log *slog.Logger, key string, addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil || ap.Addr().IsLoopback() {
		return
	}
	log.Warn(key+" serves plain HTTP on an address other machines can reach: the tokens clients send travel in the clear; listen on loopback and put a TLS proxy in front",
		"address", addr.String())
}
