// Package daemon owns the assembly of one Airlock node: it opens the store and the image
// store, installs the agent binary, builds the runtime driver, the manager and the HTTP
// server, listens on the unix socket (and TCP when configured), and shuts down cleanly
// without stopping sandboxes. It holds no rules of its own.
//
// Hostile surface it guards: the state directory and the files in it, against other
// host users and sandboxes' uids. The daemon runs with umask 066 and sets the modes of
// what it finds at start (see perms.go): nothing there is readable by others but the
// files sandboxes read on purpose.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
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
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/network"
	"github.com/airlockhq/airlock/internal/portproxy"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/server"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/version"
	"golang.org/x/sys/unix"
)

// Run serves until ctx ends. Sandboxes keep running after it returns.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) (retErr error) {
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
	st, err := sqlite.Open(filepath.Join(cfg.StateDir, "airlock.db"))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	images, err := image.Open(filepath.Join(cfg.StateDir, "images"))
	if err != nil {
		return fmt.Errorf("open images: %w", err)
	}
	var lim image.Limits
	lim.Upload, lim.Unpacked, lim.Quota = set.ImageUpload, set.ImageUnpacked, set.ImageQuota
	lim.Ratio, lim.Setuid, lim.Devices = cfg.Images.MaxRatio, cfg.Images.Setuid, cfg.Images.Devices
	lim.KeepPulledBlobs = cfg.Images.KeepPulledBlobs
	images.SetLimits(lim)
	agentBin, err := installAgent(filepath.Join(cfg.StateDir, "bin"))
	if err != nil {
		return fmt.Errorf("install agent binary: %w", err)
	}
	tmpfs, disk := set.TmpfsSize, set.DefaultDisk
	drv, err := oci.New(oci.Options{
		Root: filepath.Join(cfg.StateDir, "sandboxes"), RuncRoot: filepath.Join(cfg.StateDir, "runc"),
		Runc: cfg.Runc, AgentBinary: agentBin, Images: images, TmpfsBytes: tmpfs, CgroupParent: cfg.CgroupParent, DiskPoolBytes: disk,
		Log: log.With("component", "runtime"),
	})
	if err != nil {
		return err
	}
	defer drv.Close()
	mcfg := manager.DefaultConfig()
	mem := set.DefaultMemory
	mcfg.DefaultLimits.CPU, mcfg.DefaultLimits.Memory = cfg.DefaultLimits.CPU, mem
	mcfg.DefaultLimits.PIDs, mcfg.DefaultLimits.OpenFiles = cfg.DefaultLimits.PIDs, cfg.DefaultLimits.OpenFiles
	mcfg.DefaultLimits.Disk = disk
	mcfg.MaxLimits.OpenFiles = min(mcfg.MaxLimits.OpenFiles, drv.MaxOpenFiles())
	mcfg.HostCPU, mcfg.HostMemory = manager.HostSize()
	mcfg.DefaultMaxLifetime, mcfg.MinIdleSuspend, mcfg.MinMaxLifetime = set.MaxLifetime, set.MinIdleSuspend, set.MinMaxLifetime
	mcfg.LiveCap = cfg.LiveCap
	mcfg.MaxFileUpload = set.FileUpload
	mcfg.Router = manager.RouterConfig{Profile: cfg.Router.Profile, Threshold: cfg.Router.Threshold, FailClosed: cfg.Router.FailClosed}
	mcfg.WorkspaceDir = filepath.Join(cfg.StateDir, "workspaces")
	mcfg.StateDir = cfg.StateDir
	mcfg.InsecureRegistries, mcfg.ImageCacheMax = cfg.Images.InsecureRegistries, set.ImageCacheMax
	mcfg.RegistryMirrors = map[string][]string{}
	for reg, mirrors := range cfg.Images.Mirrors {
		mcfg.RegistryMirrors[image.RegistryOf(reg+"/x")] = mirrors // docker.io is Docker Hub's index.docker.io
	}
	mcfg.Audit.Rate, mcfg.Audit.Burst, mcfg.Audit.Queue = cfg.Audit.Rate, cfg.Audit.Burst, cfg.Audit.Queue
	mcfg.Audit.Coalesce = set.AuditCoalesce
	mcfg.EventsPerSandbox = cfg.Audit.EventsPerSandbox
	mcfg.EventMaxAge = set.EventMaxAge
	snaps, err := snapshot.Open(filepath.Join(cfg.StateDir, "snapshots"))
	if err != nil {
		return fmt.Errorf("open snapshots: %w", err)
	}
	mcfg.DefaultRuntime = cfg.DefaultRuntime
	runsc, err := openRunsc(ctx, cfg, oci.Options{
		Root: filepath.Join(cfg.StateDir, "sandboxes-runsc"), RuncRoot: filepath.Join(cfg.StateDir, "runsc"),
		AgentBinary: agentBin, Images: images, TmpfsBytes: tmpfs, CgroupParent: cfg.CgroupParent + "-runsc", DiskPoolBytes: disk,
		DiskPoolDir: filepath.Join(cfg.StateDir, "disk-pool-runsc"), Log: log.With("component", "runtime"),
	}, log)
	if err != nil {
		return err
	}
	var m *manager.Manager
	if cfg.DefaultRuntime == "runsc" {
		m = manager.New(mcfg, st, runsc, images, log)
		m.AddRuntime("runc", drv)
	} else {
		m = manager.New(mcfg, st, drv, images, log)
		if runsc != nil {
			m.AddRuntime("runsc", runsc)
		}
	}
	if runsc != nil {
		defer runsc.Close()
	} else if cfg.Runsc != "off" {
		m.AddProbe(probeRunsc) // says why there is no runsc runtime
	}
	// Beside the API socket, fences for callers who may not put one up themselves (the
	// socket's lock covers this name too), where Yama lets the daemon trace the command
	// and no fenced command can reach the socket.
	fencePath := fence.SocketPath(cfg.Socket)
	fenceNote := "" // why there is no fence socket
	if err := fence.DaemonUsable(); err != nil {
		fenceNote = err.Error()
	} else if !fence.Hides(fencePath) {
		fenceNote = "fenced commands could reach a fence socket beside " + cfg.Socket
	}
	m.AddProbe(func(context.Context) (runtime.Check, bool) { return fenceCheck(fencePath, fenceNote), true })
	m.SetSnapshots(snaps)
	authSvc, err := openAuth(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	key, err := audit.LoadKey(filepath.Join(cfg.StateDir, "audit.key"))
	if err != nil {
		return err
	}
	chain, err := audit.OpenChain(ctx, st, key)
	if err != nil {
		return err
	}
	m.SetAuditLog(chain)
	secrets, err := secret.Open(st, filepath.Join(cfg.StateDir, "secret.key"))
	if err != nil {
		return err
	}
	delivery, err := secret.NewDelivery(secrets, cfg.SecretsDir, log)
	if err != nil {
		return err
	}
	m.SetSecrets(secrets, delivery)
	go pruneAuditLog(ctx, chain, set.AuditLogMaxAge, cfg.Audit.LogMaxRecords, log)
	publicURL := ""
	if cfg.Listen != "" {
		publicURL = "http://" + cfg.Listen
		if certs != nil {
			publicURL = "https://" + cfg.Listen
		}
	}
	outLimit, outBudget := set.ExecOutputLimit, set.ExecOutputBudget
	ports := portproxy.New() // the API's exposed ports and the E2B plane's, cut together
	srv := server.New(m, server.Options{Ports: ports, Auth: authSvc, AuditLog: chain, Secrets: secrets, Version: version.String(), StateDir: cfg.StateDir, PublicURL: publicURL,
		OutputLimit: outLimit, OutputBudget: outBudget}, log)
	if cfg.Network.Enabled {
		net, err := network.New(network.Options{Dir: filepath.Join(cfg.StateDir, "network"),
			Subnet: netip.MustParsePrefix(cfg.Network.Subnet), Upstream: cfg.Network.UpstreamDNS,
			ExtraCAs: cfg.Network.ExtraCAs, Table: cfg.Network.Table, HostPrefix: cfg.Network.HostPrefix,
			MaxConns: cfg.Network.MaxConnections, MaxConnsPerOwner: cfg.Network.MaxConnectionsPerOwner,
			NewFlowRate: cfg.Network.NewConnectionsPerSecond, NodeNewFlowRate: cfg.Network.NodeNewConnectionsPerSecond, Audit: m.EgressAudit, DNSLog: m.DNSAudit, Logger: log,
			Secrets: delivery.Substitutions, API: srv.ServeFromSandbox, SessionToken: authSvc.SessionToken, EndSessions: authSvc.EndSessions})
		if err != nil {
			return fmt.Errorf("sandbox networking could not start (set network.enabled: false for loopback-only sandboxes): %w", err)
		}
		defer net.Close()
		m.SetNetwork(net)
		m.AddProbe(net.Probe)
		if c, _ := net.Probe(ctx); !c.OK {
			log.Error("sandbox networking does not work", "reason", c.Detail, "means", c.Degrades)
		}
	}
	if err := m.Recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	m.Start()
	defer m.Close()

	hs := &http.Server{Handler: srv, ConnContext: server.ConnContext, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}

	ul, err := listenUnix(cfg.Socket, 0o660)
	if err != nil {
		return err
	}
	defer os.Remove(cfg.Socket) // on every way out, the lock still held
	errc := make(chan error, 4)
	go func() { errc <- hs.Serve(ul) }()
	if fenceNote == "" { // the fence socket, as decided above
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
		log.Info("no fence socket: `airlock fence` run by users other than root starts itself again instead", "why", fenceNote)
	}
	if cfg.Listen != "" {
		tl, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			hs.Close()
			return err
		}
		// A server of its own: one http.Server serving plain HTTP on the socket first
		// answers HTTP/2 over TLS with a closed connection.
		ts := &http.Server{Handler: srv, ReadHeaderTimeout: hs.ReadHeaderTimeout, ErrorLog: hs.ErrorLog}
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
	if cfg.E2BListen != "" {
		key, err := e2bTokenKey(cfg.StateDir)
		if err != nil {
			hs.Close()
			return err
		}
		el, err := net.Listen("tcp", cfg.E2BListen)
		if err != nil {
			hs.Close()
			return fmt.Errorf("e2b_listen: %w", err)
		}
		ec := e2b.NewControl(m, e2b.Options{Ports: ports, Auth: authSvc, Log: log, AuditLog: chain,
			TokenKey: key, Domain: cfg.E2BDomain})
		es := &http.Server{Handler: ec,
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
			ec.Close()
		}()
		log.Info("listening", "e2b", el.Addr().String(), "tls", certs != nil)
	}
	log.Info("airlock serving", "socket", cfg.Socket, "state_dir", cfg.StateDir, "version", version.String())
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

// installAgent copies the running binary into dir (unless an identical copy is there),
// so every sandbox binds a stable file that a rebuild elsewhere does not change.
func installAgent(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "airlock")
	want, err := fileHash(self)
	if err != nil {
		return "", err
	}
	if have, err := fileHash(dst); err == nil && have == want {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	src, err := os.Open(self)
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
