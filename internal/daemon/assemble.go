package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/clustertls"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/console"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/network"
	"github.com/airlockhq/airlock/internal/portproxy"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/server"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/postgres"
	"github.com/airlockhq/airlock/internal/store/sqlite"
	"github.com/airlockhq/airlock/internal/version"
	"github.com/airlockhq/airlock/internal/volume"
)

// Options are what Assemble takes besides the configuration: the parts a test
// substitutes, never a rule. The zero value builds the node `airlock serve` runs.
type Options struct {
	// Log is the node's log (default slog.Default()).
	Log *slog.Logger
	// Version is what /v1/status reports (default: this build's version).
	Version string
	// AgentBinary is the binary sandboxes run as their agent (default: the airlock-agent
	// beside the running binary, installed into the state directory).
	AgentBinary string
	// Driver, if set, makes the default runtime's driver in place of runc (a fake
	// runtime, which needs no root); the node then has no runsc.
	Driver func(images *image.Store) (runtime.Driver, error)
	// WrapDriver, if set, stands between the manager and the default runtime's driver.
	WrapDriver func(runtime.Driver) runtime.Driver
	// SecretDelivery, if set, delivers bound secrets in place of the tmpfs on
	// secrets_dir (secret.NewFakeDelivery, which needs no root); when it returns nil,
	// bindings are kept but reach no sandbox.
	SecretDelivery func(*secret.Service, *slog.Logger) (*secret.Delivery, error)
	// Manager, if set, adjusts the manager's configuration after the file's (a test's
	// shorter timers).
	Manager func(*manager.Config)
	// ClusterTLS, if set, stands for the node's cluster identity (Node.ClusterTLS, made
	// when node.listen is set): with either, a node of a cluster forwards calls about
	// other nodes' sandboxes to them, and serves node.listen (ClusterServer).
	ClusterTLS forward.ClusterTLS
	// Place, with ClusterTLS, chooses the node of each new sandbox (nil: here).
	Place forward.Place
}

// Node is one assembled Airlock node: every part `airlock serve` wires, recovered and
// started, without its listeners. Close stops it; sandboxes keep running.
type Node struct {
	Store     store.Store
	Images    *image.Store
	Snapshots *snapshot.Store
	// Runc is the runc driver (nil when Options.Driver made the default one), Runsc
	// the gVisor driver (nil without runsc), Driver the default runtime's as the
	// manager has it.
	Runc     *oci.Driver
	Runsc    *gvisor.Driver
	Driver   runtime.Driver
	Manager  *manager.Manager
	Auth     *auth.Service
	AuditLog *audit.Chain
	Secrets  *secret.Service
	Delivery *secret.Delivery // nil: secrets are not delivered
	Network  *network.Node    // nil without sandbox networking
	// Lease is the node's membership of its cluster (alone, a cluster of one).
	Lease *membership.Lease
	// ClusterTLS is the node's identity for mutual TLS with the other nodes (nil unless
	// node.listen is set): the configurations of its listener for them and of its
	// dials to each, and who a peer is.
	ClusterTLS *clustertls.Identity
	// Ports forwards exposed ports' traffic for every plane.
	Ports  *portproxy.Proxy
	Server *server.Server
	// Console is the web console, served beside the API on every listener of it
	// (Handler): a client of the API with each viewer's own token.
	Console *console.Console
	// Metrics is the node's Prometheus series, served at /metrics.
	Metrics *metrics.Set
	// Forward proxies calls to the cluster's other nodes (nil: none, a node alone).
	Forward    *forward.Forwarder
	clusterTLS forward.ClusterTLS
	// E2B is the E2B-compatible plane, when e2b_listen is set.
	E2B *e2b.Control
	// FenceSocket is where the daemon serves fences beside the API socket, unless
	// FenceNote says why it does not.
	FenceSocket, FenceNote string

	log     *slog.Logger
	closers []func() // in the order they were added; Close runs them backwards
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Assemble builds the node cfg describes: the store, images, snapshots, runtimes,
// manager, identities, audit chain, secrets, network, the HTTP API and the E2B plane,
// then recovers and starts the manager. Checks of the host and the files it reads
// (root, locks, trusted paths) are the caller's (Run's). On error nothing it started
// is left running.
func Assemble(ctx context.Context, cfg config.Config, opts Options) (_ *Node, retErr error) {
	set, err := cfg.Settings()
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	n := &Node{log: log}
	defer func() {
		if retErr != nil {
			n.Close()
		}
	}()
	if n.Store, err = OpenStore(ctx, cfg); err != nil {
		return nil, err
	}
	n.closers = append(n.closers, func() { n.Store.Close() })
	// The keys next: a node whose keys are not the cluster's starts nothing.
	keys, err := loadKeys(cfg, n.Store)
	if err != nil {
		return nil, err
	}
	if err := checkClusterKeys(ctx, n.Store, cfg, keys); err != nil {
		return nil, err
	}
	// The join token next: a node that serves others with a token not the cluster's
	// starts nothing.
	if err := n.openClusterTLS(ctx, cfg, set); err != nil {
		return nil, err
	}
	// The node's name then: a node whose name another live node holds starts nothing.
	if err := n.joinCluster(ctx, cfg, set); err != nil {
		return nil, err
	}
	if n.Images, err = image.Open(filepath.Join(cfg.StateDir, "images")); err != nil {
		return nil, fmt.Errorf("open images: %w", err)
	}
	var lim image.Limits
	lim.Upload, lim.Unpacked, lim.Quota = set.ImageUpload, set.ImageUnpacked, set.ImageQuota
	lim.Ratio, lim.Setuid, lim.Devices = cfg.Images.MaxRatio, cfg.Images.Setuid, cfg.Images.Devices
	lim.KeepPulledBlobs = cfg.Images.KeepPulledBlobs
	n.Images.SetLimits(lim)
	if err := n.openRuntimes(ctx, cfg, set, opts); err != nil {
		return nil, err
	}
	mcfg := managerConfig(cfg, set)
	if d, ok := n.Driver.(interface{ MaxOpenFiles() int64 }); ok {
		mcfg.MaxLimits.OpenFiles = min(mcfg.MaxLimits.OpenFiles, d.MaxOpenFiles())
	}
	if opts.Manager != nil {
		opts.Manager(&mcfg)
	}
	if n.Snapshots, err = snapshot.Open(filepath.Join(cfg.StateDir, "snapshots")); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	if cfg.Objects.Endpoint != "" {
		objs, err := openObjects(ctx, cfg.Objects, log)
		if err != nil {
			return nil, err
		}
		n.Snapshots.UseObjects(objs, 0)
	}
	n.Manager = manager.New(mcfg, n.Store, n.Driver, n.Images, log)
	n.Manager.SetMembership(n.Lease)
	if cfg.DefaultRuntime == "runsc" && n.Runc != nil {
		n.Manager.AddRuntime("runc", n.Runc)
	} else if n.Runsc != nil {
		n.Manager.AddRuntime("runsc", n.Runsc)
	}
	if n.Runsc == nil && cfg.Runsc != "off" && opts.Driver == nil {
		n.Manager.AddProbe(probeRunsc) // says why there is no runsc runtime
	}
	n.FenceSocket, n.FenceNote = fenceSocket(cfg.Socket)
	n.Manager.AddProbe(func(context.Context) (runtime.Check, bool) { return fenceCheck(n.FenceSocket, n.FenceNote), true })
	n.Manager.SetSnapshots(n.Snapshots)
	vols, err := volume.New(filepath.Join(cfg.StateDir, "volumes"), log)
	if err != nil {
		return nil, fmt.Errorf("open volumes: %w", err)
	}
	n.Manager.SetVolumes(vols)
	if err := n.openPlanes(ctx, cfg, set, keys, opts); err != nil {
		return nil, err
	}
	if err := n.Manager.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	n.Manager.Start()
	n.closers = append(n.closers, func() { n.Manager.Close() })
	if n.Lease != nil {
		n.Lease.Start()
	}
	setPools(ctx, n.Manager, set.Pools, log)
	if err := n.Manager.StartPools(ctx); err != nil {
		return nil, fmt.Errorf("pools: %w", err)
	}
	var pctx context.Context
	pctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.wg.Go(func() { pruneAuditLog(pctx, n.AuditLog, set.AuditLogMaxAge, cfg.Audit.LogMaxRecords, log) })
	return n, nil
}

// OpenStore opens the store cfg names: the PostgreSQL database of store.dsn, shared
// with the other nodes that name it, or else SQLite in the state directory. Its errors
// never hold the DSN's password.
func OpenStore(ctx context.Context, cfg config.Config) (store.Store, error) {
	if cfg.Store.DSN != "" {
		s, err := postgres.Open(ctx, string(cfg.Store.DSN))
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		return s, nil
	}
	s, err := sqlite.Open(filepath.Join(cfg.StateDir, "airlock.db"))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

// managerConfig is the manager's configuration from the file's.
func managerConfig(cfg config.Config, set config.Settings) manager.Config {
	mcfg := manager.DefaultConfig()
	mcfg.DefaultLimits.CPU, mcfg.DefaultLimits.Memory = cfg.DefaultLimits.CPU, set.DefaultMemory
	mcfg.DefaultLimits.PIDs, mcfg.DefaultLimits.OpenFiles = cfg.DefaultLimits.PIDs, cfg.DefaultLimits.OpenFiles
	mcfg.DefaultLimits.Disk = set.DefaultDisk
	mcfg.HostCPU, mcfg.HostMemory = manager.HostSize()
	mcfg.NodeMemory = set.Node.Memory
	mcfg.DefaultMaxLifetime, mcfg.MinIdleSuspend, mcfg.MinMaxLifetime = set.MaxLifetime, set.MinIdleSuspend, set.MinMaxLifetime
	mcfg.LiveCap = cfg.LiveCap
	mcfg.VolumeQuota = set.VolumeQuota
	mcfg.MaxFileUpload = set.FileUpload
	mcfg.MaxTreeEntries, mcfg.MaxTreeBytes = set.TreeEntries, set.TreeBytes
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
	mcfg.DefaultRuntime = cfg.DefaultRuntime
	mcfg.NodeName, mcfg.NodeLabels, mcfg.SharedStore = set.Node.Name, set.Node.Labels, cfg.Store.DSN != ""
	mcfg.Usage = manager.UsageConfig{Interval: set.Metrics.Interval, History: set.Metrics.History, Budget: set.Metrics.History * 4096}
	return mcfg
}

// openPlanes opens identities, the audit chain and secrets, and builds what serves
// them: the HTTP API, sandbox networking and the E2B plane.
func (n *Node) openPlanes(ctx context.Context, cfg config.Config, set config.Settings, keys *nodeKeys, opts Options) error {
	var err error
	log, m := n.log, n.Manager
	if n.Auth, err = openAuth(ctx, cfg, n.Store, log); err != nil {
		return err
	}
	if n.AuditLog, err = audit.OpenChain(ctx, n.Store, keys.audit); err != nil {
		return err
	}
	m.SetAuditLog(n.AuditLog)
	n.Secrets = keys.secrets
	if opts.SecretDelivery != nil {
		n.Delivery, err = opts.SecretDelivery(n.Secrets, log)
	} else {
		n.Delivery, err = secret.NewDelivery(n.Secrets, cfg.SecretsDir, log)
	}
	if err != nil {
		return err
	}
	m.SetSecrets(n.Secrets, n.Delivery)
	publicURL := ""
	if cfg.Listen != "" {
		publicURL = "http://" + cfg.Listen
		if cfg.TLSCert != "" {
			publicURL = "https://" + cfg.Listen
		}
	}
	ver := opts.Version
	if ver == "" {
		ver = version.String()
	}
	n.Ports = portproxy.New() // the API's exposed ports and the E2B plane's, cut together
	n.Metrics = metrics.New(m.MetricsSnapshot, metrics.Options{PerSandbox: set.Metrics.PerSandbox, MaxSandboxSeries: set.Metrics.MaxSandboxSeries})
	m.SetMetrics(n.Metrics)
	sopts := server.Options{Ports: n.Ports, Auth: n.Auth, AuditLog: n.AuditLog, Secrets: n.Secrets, Version: ver,
		StateDir: cfg.StateDir, PublicURL: publicURL, OutputLimit: set.ExecOutputLimit, OutputBudget: set.ExecOutputBudget,
		Metrics: n.Metrics.Handler()}
	n.clusterTLS = opts.ClusterTLS
	if n.clusterTLS == nil && n.ClusterTLS != nil {
		n.clusterTLS = n.ClusterTLS
	}
	if n.clusterTLS != nil && n.Lease != nil {
		n.Forward = forward.New(forward.Options{TLS: n.clusterTLS, Peers: n.peers, Log: log})
		n.closers = append(n.closers, n.Forward.Close)
		sopts.Forward, sopts.ClusterTLS, sopts.Place = n.Forward, n.clusterTLS, opts.Place
		if sopts.Place == nil {
			sopts.Place = placeBy(m)
		}
	} else {
		n.clusterTLS = nil
	}
	n.Server = server.New(m, sopts, log)
	if cfg.Console.Enabled {
		n.Console = console.New(console.Options{API: n.Server, Log: log})
		n.closers = append(n.closers, func() { n.Console.Close() })
	}
	if cfg.Network.Enabled {
		if err := n.openNetwork(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.E2BListen != "" {
		n.E2B = e2b.NewControl(m, e2b.Options{Ports: n.Ports, Auth: n.Auth, Log: log, AuditLog: n.AuditLog,
			TokenKey: keys.e2b, Domain: cfg.E2BDomain, Forward: n.Forward, ClusterTLS: n.clusterTLS, Place: sopts.Place})
		n.closers = append(n.closers, n.E2B.Close)
	}
	return nil
}

// openNetwork starts sandbox networking: namespaces, nftables, the egress proxy and DNS.
func (n *Node) openNetwork(ctx context.Context, cfg config.Config) error {
	c := cfg.Network
	nn, err := network.New(network.Options{Dir: filepath.Join(cfg.StateDir, "network"),
		Subnet: netip.MustParsePrefix(c.Subnet), Upstream: c.UpstreamDNS,
		ExtraCAs: c.ExtraCAs, Table: c.Table, HostPrefix: c.HostPrefix,
		MaxConns: c.MaxConnections, MaxConnsPerOwner: c.MaxConnectionsPerOwner,
		NewFlowRate: c.NewConnectionsPerSecond, NodeNewFlowRate: c.NodeNewConnectionsPerSecond,
		Audit: n.Manager.EgressAudit, DNSLog: n.Manager.DNSAudit, Logger: n.log,
		Secrets: n.Delivery.Substitutions, API: n.Server.ServeFromSandbox, SessionToken: n.Auth.SessionToken, EndSessions: n.Auth.EndSessions})
	if err != nil {
		return fmt.Errorf("sandbox networking could not start (set network.enabled: false for loopback-only sandboxes): %w", err)
	}
	n.Network = nn
	n.closers = append(n.closers, func() { nn.Close() })
	n.Manager.SetNetwork(nn)
	n.Manager.AddProbe(nn.Probe)
	if c := nn.ProbeNow(ctx); !c.OK {
		n.log.Error("sandbox networking does not work", "reason", c.Detail, "means", c.Degrades)
	}
	return nil
}

// APIServer is an http.Server of the node's API for one listener that gets callers'
// credentials from the connection (the unix socket).
func (n *Node) APIServer() *http.Server {
	return &http.Server{Handler: n.Handler(), ConnContext: server.ConnContext, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
}

// Handler serves the node's API at /v1 and its web console at every other path (the
// API alone when the console is off).
func (n *Node) Handler() http.Handler {
	if n.Console == nil {
		return n.Server
	}
	return console.Mount(n.Server, n.Console)
}

// peers lists the cluster's nodes for the forwarder.
func (n *Node) peers(ctx context.Context) ([]forward.Peer, error) {
	list, err := n.Lease.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]forward.Peer, len(list))
	for i, p := range list {
		out[i] = forward.Peer{Name: p.Name, Address: p.Address, State: string(p.State)}
	}
	return out, nil
}

// ClusterServer is an http.Server of the node listener (node.listen), for the calls the
// cluster's other nodes forward here: TLS with a client certificate of the cluster's CA
// required (nil when the node has no ClusterTLS). Serve it with ServeTLS(l, "", "").
func (n *Node) ClusterServer() *http.Server {
	if n.clusterTLS == nil {
		return nil
	}
	tc := n.clusterTLS.ServerConfig().Clone()
	tc.ClientAuth = tls.RequireAndVerifyClientCert // whatever the CA's config says: only nodes
	return &http.Server{Handler: http.HandlerFunc(n.serveCluster), TLSConfig: tc,
		ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
}

// serveCluster sends a call another node forwarded to the plane it is for: the E2B
// plane's (forward.PlaneE2B) to it, when this node serves one; any other to the API.
func (n *Node) serveCluster(w http.ResponseWriter, r *http.Request) {
	switch plane := r.Header.Get(forward.PlaneHeader); {
	case plane == "":
		n.Server.ServeCluster(w, r)
	case plane == forward.PlaneE2B && n.E2B != nil:
		n.E2B.ServeCluster(w, r)
	default:
		msg := fmt.Sprintf("node %q serves no %q plane: a call for it cannot be forwarded here", n.Manager.NodeName(), plane)
		if plane == forward.PlaneE2B {
			msg += " (its e2b_listen is not set)"
		}
		http.Error(w, msg, http.StatusNotImplemented)
	}
}

// Close stops the node, in the reverse order of its making: sandboxes keep running.
func (n *Node) Close() error {
	if n.cancel != nil {
		n.cancel()
		n.wg.Wait()
	}
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
	return nil
}

// fenceSocket is where the daemon serves fences, beside the API socket (whose lock
// covers this name too), for callers who may not put one up themselves; note says why
// there is none: Yama must let the daemon trace the command, and no fenced command may
// reach the socket.
func fenceSocket(apiSocket string) (path, note string) {
	path = fence.SocketPath(apiSocket)
	if err := fence.DaemonUsable(); err != nil {
		note = err.Error()
	} else if !fence.Hides(path) {
		note = "fenced commands could reach a fence socket beside " + apiSocket
	}
	return path, note
}
