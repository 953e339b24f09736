// Package network owns a node's egress assembly: one network namespace and veth per
// sandbox (through sandboxlink), the egress proxy with its explicit, transparent-HTTP,
// transparent-TLS and TCP-relay listeners, the policy-aware DNS server, the node CA and
// the files and variables that point a sandbox's clients at them. It implements
// netattach.Network. It must not touch the store or containers, nor import the manager;
// it only keeps each sandbox's current policy.
//
// Hostile surfaces are guarded in egress (what a sandbox sends) and sandboxlink (its link);
// here, each sandbox's client files live in a directory only that sandbox's gid can
// search, only the CA bundle (public certificates) is readable by every sandbox, and
// the connections sandboxes hold to the listeners are capped per sandbox, per owner and
// node-wide from the daemon's open-files limit, leaving descriptors for the API and the
// agents (limit.go).
package network

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/sandboxlink"
	"github.com/airlockhq/airlock/internal/store"
)

var (
	_ netattach.Network    = (*Node)(nil)
	_ netattach.Reassigner = (*Node)(nil)
)

// Options configure a node's network.
type Options struct {
	// Dir holds the node CA, the CA bundle sandboxes trust and per-sandbox files.
	Dir string
	// Subnet is carved into one link per sandbox (default 10.203.0.0/16).
	Subnet netip.Prefix
	// HostPrefix starts every host-side veth name (default "al").
	HostPrefix string
	// Table names the node's nftables table (default "airlock").
	Table string
	// Upstream is the resolver allowed DNS queries go to ("ip:port"; default: the first
	// nameserver of the host's /etc/resolv.conf).
	Upstream string
	// ExtraCAs are PEM files of CAs that upstream servers may also be signed by.
	ExtraCAs []string
	// MaxConns caps the connections one sandbox holds open to the proxy, its relay and
	// DNS at once (default DefaultMaxConns).
	MaxConns int
	// MaxConnsPerOwner caps them across one owner's sandboxes, and MaxConnsNode across
	// the node (defaults: from the daemon's open-files limit, see connBudget).
	MaxConnsPerOwner, MaxConnsNode int
	// NewFlowRate and NodeNewFlowRate pace the new connections and DNS flows of one
	// sandbox and of all of them, a second (defaults: sandboxlink's).
	NewFlowRate, NodeNewFlowRate int
	// Secrets returns a sandbox's proxy-delivered secrets; it is called per request.
	Secrets func(sandbox string) []egress.Substitution
	// API serves the requests sandboxes send to egress.APIHost, with the session token
	// in place; SessionToken mints that token for a sandbox's owner and role.
	API          func(w http.ResponseWriter, r *http.Request, sandbox string)
	SessionToken func(ctx context.Context, owner, role, sandbox string) (string, error)
	// EndSessions, if set, invalidates a sandbox's session tokens as it is detached.
	EndSessions func(sandbox string)
	// Audit receives every egress decision; DNSLog every DNS query.
	Audit  func(egress.Record)
	DNSLog func(egress.DNSRecord)
	Logger *slog.Logger
}

// Paths inside a sandbox.
const (
	caBundlePath = "/etc/ssl/certs/ca-certificates.crt"
	resolvPath   = "/etc/resolv.conf"
)

// Node is one node's egress assembly.
type Node struct {
	opts   Options
	log    *slog.Logger
	nm     *sandboxlink.Manager
	ca     *egress.CA
	bundle string
	proxy  *egress.Proxy
	dns    *egress.DNSServer
	ports  ports
	lns    []net.Listener
	udp    net.PacketConn

	names egress.ResolvedNames // what each sandbox resolved, for plain TCP rules by name
	limit *connLimit
	files *bindsource.Names // the names of sandboxes' directories on the files tmpfs

	mu     sync.RWMutex
	info   map[string]egress.SandboxInfo
	owners map[string]string // sandbox id -> owner, for the connection caps
	roles  map[string]string // sandbox id -> the role it acts with ("": its owner's)
	links  map[string]*sandboxlink.Sandbox

	probe probeCache // the last Probe

	wg   sync.WaitGroup
	stop chan struct{} // closed by Close: ends the table's guard
}

// tableCheckEvery is how often the node checks that its nftables table is whole.
const tableCheckEvery = 2 * time.Second

// ports are the node's listening ports, on every address.
type ports struct{ Proxy, HTTP, TLS, TCP, DNS int }

// New starts the node's proxy and DNS listeners and the namespace manager.
func New(opts Options) (_ *Node, retErr error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if !opts.Subnet.IsValid() {
		opts.Subnet = netip.MustParsePrefix("10.203.0.0/16")
	}
	if opts.HostPrefix == "" {
		opts.HostPrefix = "al"
	}
	if opts.Upstream == "" {
		opts.Upstream = hostResolver()
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.Audit == nil {
		opts.Audit = func(egress.Record) {}
	}
	node, perOwner := connBudget()
	if opts.MaxConnsNode <= 0 {
		opts.MaxConnsNode = node
	}
	if opts.MaxConnsPerOwner <= 0 {
		opts.MaxConnsPerOwner = min(perOwner, opts.MaxConnsNode)
	}
	n := &Node{opts: opts, log: opts.Logger.With("component", "network"),
		info: map[string]egress.SandboxInfo{}, owners: map[string]string{}, roles: map[string]string{}, links: map[string]*sandboxlink.Sandbox{}}
	n.log.Info("sandbox connection caps", "per_sandbox", opts.MaxConns, "per_owner", opts.MaxConnsPerOwner, "node", opts.MaxConnsNode)
	n.limit = newConnLimit(opts.MaxConns, opts.MaxConnsPerOwner, opts.MaxConnsNode, n.ownerOf, opts.Audit)
	defer func() {
		if retErr != nil {
			n.Close()
		}
	}()
	var err error
	if n.files, err = openFiles(filepath.Join(opts.Dir, filesDir)); err != nil {
		return nil, err
	}
	if n.ca, err = egress.LoadOrCreateCA(filepath.Join(opts.Dir, "ca")); err != nil {
		return nil, err
	}
	var extra [][]byte
	for _, f := range opts.ExtraCAs {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("extra CA: %w", err)
		}
		extra = append(extra, b)
	}
	if n.bundle, err = writeBundle(opts.Dir, append([][]byte{n.ca.CertPEM()}, extra...)...); err != nil {
		return nil, err
	}
	roots, err := egress.RootPool(extra...)
	if err != nil {
		return nil, err
	}
	known := nodeAddrs()
	guard := egress.Guard{Node: known, Sandboxes: []netip.Prefix{opts.Subnet}}
	pcfg := egress.Config{CA: n.ca, Lookup: n.lookup, Audit: opts.Audit, NamesOf: n.names.Names}
	if opts.API != nil && opts.SessionToken != nil {
		pcfg.API = func(w http.ResponseWriter, r *http.Request, sb egress.SandboxInfo) { opts.API(w, r, sb.ID) }
		pcfg.SessionToken = n.sessionToken
	}
	pcfg.Dialer = proxyDialer(guard, upstreamResolver(opts.Upstream))
	pcfg.UpstreamRoots, pcfg.Logger = roots, opts.Logger
	n.proxy, err = egress.NewProxy(pcfg)
	if err != nil {
		return nil, err
	}
	// The listeners carry the mark the node's table will protect them by; the lock
	// ReserveMark takes is held until the table names it.
	mark, release, err := sandboxlink.ReserveMark("", opts.Table)
	if err != nil {
		return nil, err
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	if err := n.listen(mark); err != nil {
		return nil, err
	}
	n.dns, err = egress.NewDNSServer(egress.DNSConfig{Lookup: n.lookup, Upstream: opts.Upstream, Guard: guard,
		Log: opts.DNSLog, Resolved: n.names.Add, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	n.nm, err = sandboxlink.New(sandboxlink.Config{Subnet: opts.Subnet, HostPrefix: opts.HostPrefix,
		RunDir: filepath.Join(opts.Dir, "netns"), ProxyPort: n.ports.Proxy,
		TransparentHTTPPort: n.ports.HTTP, TransparentTLSPort: n.ports.TLS, TransparentTCPPort: n.ports.TCP,
		DNSPort: n.ports.DNS, Table: opts.Table, NewFlowRate: opts.NewFlowRate, NodeNewFlowRate: opts.NodeNewFlowRate,
		ListenerMark: mark})
	if err != nil {
		return nil, err
	}
	release()
	release = nil
	n.serve()
	return n, nil
}

// listen opens the proxy and DNS sockets, DNS on one port number for UDP and TCP. The
// ports are the ones the node had before (kept in ports.json) when they are still
// free, so sandboxes that run on across a restart of the daemon keep reaching the
// proxy at the address their environment names; otherwise any free ones, which
// ports.json then remembers (the nftables rules name whatever ports the node got).
func (n *Node) listen(mark uint32) error {
	path := filepath.Join(n.opts.Dir, "ports.json")
	var saved ports
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &saved) // unreadable: start afresh
	}
	// Every socket carries the mark by which the rules keep all but sandboxes out.
	lc := net.ListenConfig{Control: sandboxlink.MarkSocket(mark)}
	ctx := context.Background()
	listen := func(want int) (net.Listener, int, error) {
		if want != 0 {
			if l, err := lc.Listen(ctx, "tcp4", "0.0.0.0:"+strconv.Itoa(want)); err == nil {
				return l, want, nil
			}
		}
		l, err := lc.Listen(ctx, "tcp4", "0.0.0.0:0")
		if err != nil {
			return nil, 0, err
		}
		return l, l.Addr().(*net.TCPAddr).Port, nil
	}
	for _, p := range []struct{ want, got *int }{
		{&saved.Proxy, &n.ports.Proxy}, {&saved.HTTP, &n.ports.HTTP}, {&saved.TLS, &n.ports.TLS}, {&saved.TCP, &n.ports.TCP},
	} {
		l, port, err := listen(*p.want)
		if err != nil {
			return err
		}
		n.lns, *p.got = append(n.lns, l), port
	}
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return errors.New("network: no port free for DNS on both UDP and TCP")
		}
		want := saved.DNS
		if attempt > 0 {
			want = 0
		}
		l, port, err := listen(want)
		if err != nil {
			return err
		}
		pc, err := lc.ListenPacket(ctx, "udp4", "0.0.0.0:"+strconv.Itoa(port))
		if err != nil {
			l.Close()
			continue
		}
		n.lns, n.udp, n.ports.DNS = append(n.lns, l), pc, port
		break
	}
	if n.ports != saved {
		b, _ := json.Marshal(n.ports)
		return durable.WriteFile(path, b, 0o600)
	}
	return nil
}

func (n *Node) serve() {
	n.stop = make(chan struct{})
	n.wg.Go(n.guardTable)
	n.wg.Add(6)
	go func() { defer n.wg.Done(); n.proxy.Serve(&limitedListener{Listener: n.lns[0], lim: n.limit}) }()
	go func() { defer n.wg.Done(); n.acceptTransparent(n.lns[1], n.proxy.ServeTransparent) }()
	go func() { defer n.wg.Done(); n.acceptTransparent(n.lns[2], n.proxy.ServeTransparent) }()
	go func() { defer n.wg.Done(); n.acceptTransparent(n.lns[3], n.proxy.ServeTCP) }()
	go func() { defer n.wg.Done(); n.dns.ServePacket(n.udp) }()
	go func() {
		defer n.wg.Done()
		n.dns.ServeStream(&limitedListener{Listener: n.lns[4], lim: n.limit, port: 53})
	}()
}

// acceptTransparent hands redirected connections to serve with their original
// destination.
func (n *Node) acceptTransparent(l net.Listener, serve func(net.Conn, netip.AddrPort)) {
	for {
		c, err := acceptRetry(l)
		if err != nil {
			return
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		dst, err := sandboxlink.OriginalDst(tc)
		if err != nil {
			c.Close()
			continue
		}
		if admitted := n.limit.admit(tc, int(dst.Port())); admitted != nil {
			serve(admitted, dst)
		}
	}
}

// guardTable puts the sandboxes' rules back whenever something else on the host has
// removed or changed them (see sandboxlink.Manager.Repair), until Close: at once when
// the kernel reports a deletion in the ruleset, and every tableCheckEvery whatever it
// reports (a change that deletes nothing, a watch that failed and is started again).
func (n *Node) guardTable() {
	tick := time.NewTicker(tableCheckEvery)
	defer tick.Stop()
	var changes <-chan struct{}
	stopWatch := func() {}
	defer func() { stopWatch() }()
	for {
		if changes == nil {
			if c, stop, err := n.nm.WatchDeletions(); err == nil {
				changes, stopWatch = c, stop
			} else {
				n.log.Debug("watch the nftables ruleset", "err", err)
			}
		}
		select {
		case <-n.stop:
			return
		case <-tick.C:
		case _, ok := <-changes:
			if !ok { // the watch failed: check now, watch again next time round
				stopWatch()
				changes, stopWatch = nil, func() {}
			}
		}
		switch repaired, err := n.nm.Repair(); {
		case err != nil:
			n.log.Error("the sandbox network's nftables table could not be checked or rewritten; sandboxes may be unfiltered", "err", err)
		case repaired:
			n.log.Warn("the sandbox network's nftables table was changed by something else on the host; it has been written again")
		}
	}
}

// Close stops the listeners. Sandbox namespaces stay for the next start to find.
func (n *Node) Close() error {
	if n.stop != nil {
		close(n.stop)
	}
	for _, l := range n.lns {
		l.Close()
	}
	if n.udp != nil {
		n.udp.Close()
	}
	if n.proxy != nil {
		n.proxy.Close()
	}
	if n.dns != nil {
		n.dns.Close()
	}
	n.wg.Wait()
	if n.nm != nil {
		n.nm.Close()
	}
	// Running sandboxes keep their binds of the bundle; only the node's view goes.
	return errors.Join(bindsource.Unview(filepath.Join(n.opts.Dir, bundleView)),
		closeFiles(filepath.Join(n.opts.Dir, filesDir)))
}

func (n *Node) lookup(remote netip.AddrPort) (egress.SandboxInfo, bool) {
	id, ok := n.nm.Lookup(remote.Addr())
	if !ok {
		return egress.SandboxInfo{}, false
	}
	n.mu.RLock()
	info, ok := n.info[id]
	n.mu.RUnlock()
	if ok && n.opts.Secrets != nil {
		info.Secrets = n.opts.Secrets(id)
	}
	return info, ok
}

// sessionToken is the token the proxy swaps in for a sandbox's session placeholder.
func (n *Node) sessionToken(sb egress.SandboxInfo) (string, error) {
	n.mu.RLock()
	owner, ok := n.owners[sb.ID]
	role := n.roles[sb.ID]
	n.mu.RUnlock()
	if !ok {
		return "", errors.New("the sandbox is not attached")
	}
	return n.opts.SessionToken(context.Background(), owner, role, sb.ID)
}

// sessionPlaceholder is what a sandbox's session token file holds: it means something
// only in that sandbox's own requests to the API, where the proxy swaps it.
func sessionPlaceholder(id string) string {
	sum := sha256.Sum256([]byte("airlock session placeholder\x00" + id))
	return "al_session_" + hex.EncodeToString(sum[:16])
}

// ownerOf gives the sandbox a source address belongs to and its owner. A sandbox whose
// link exists but is not attached (yet) counts under its own id as the owner.
func (n *Node) ownerOf(a netip.Addr) (id, owner string, ok bool) {
	if id, ok = n.nm.Lookup(a); !ok {
		return "", "", false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if owner, ok = n.owners[id]; !ok {
		owner = "\x00" + id
	}
	return id, owner, true
}

// Attach implements netattach.Network.
func (n *Node) Attach(ctx context.Context, sb *store.Sandbox, pol egress.Policy) (*netattach.Attachment, error) {
	mode := "egress"
	if pol.Mode == egress.ModeNone {
		mode = sandboxlink.ModeNone
	}
	link, ok := n.nm.Get(sb.ID)
	if !ok {
		var err error
		if link, err = n.nm.Create(ctx, sb.ID, mode); err != nil {
			return nil, err
		}
	}
	n.mu.Lock()
	n.info[sb.ID] = egress.SandboxInfo{ID: sb.ID, Generation: sb.Generation, Policy: pol, SessionPlaceholder: sessionPlaceholder(sb.ID)}
	n.owners[sb.ID] = sb.Owner
	n.roles[sb.ID] = sb.Role
	n.links[sb.ID] = link
	n.mu.Unlock()
	dir := n.FilesDir(sb.ID)
	if err := ownDir(dir, sb.UIDBase); err != nil {
		return nil, err
	}
	nameserver := "127.0.0.1"
	if link.HostAddr.IsValid() {
		nameserver = link.HostAddr.String()
	}
	session := filepath.Join(dir, "session-token")
	if err := writeConfFile(session, []byte(sessionPlaceholder(sb.ID)+"\n")); err != nil {
		return nil, err
	}
	resolv := filepath.Join(dir, "resolv.conf")
	if err := writeConfFile(resolv, []byte("nameserver "+nameserver+"\noptions ndots:0 timeout:2 attempts:2\n")); err != nil {
		return nil, err
	}
	// Clients are pointed at the proxy and CA by variables and, for programs that scrub
	// their environment, by the system-wide files of pip, git, npm and login shells.
	cc := clientConf{CAFile: caBundlePath}
	if link.HostAddr.IsValid() {
		cc.Proxy = "http://" + netip.AddrPortFrom(link.HostAddr, uint16(n.ports.Proxy)).String()
	}
	confMounts, err := writeClientConf(dir, cc)
	if err != nil {
		return nil, err
	}
	env := cc.env()
	if cc.Proxy != "" {
		env = append(env, "AIRLOCK_API=http://"+egress.APIHost, "AIRLOCK_SESSION_TOKEN_FILE="+netattach.SessionTokenPath)
	}
	att := &netattach.Attachment{NetnsPath: link.NetnsPath, Env: env, Mounts: append([]runtime.Mount{
		{Source: session, Destination: netattach.SessionTokenPath, ReadOnly: true},
		{Source: resolv, Destination: resolvPath, ReadOnly: true},
		{Source: n.bundle, Destination: caBundlePath, ReadOnly: true},
	}, confMounts...)}
	return att, nil
}

// Detach implements netattach.Network.
func (n *Node) Detach(ctx context.Context, id string) error {
	n.mu.Lock()
	delete(n.info, id)
	delete(n.owners, id)
	delete(n.roles, id)
	delete(n.links, id)
	n.mu.Unlock()
	n.names.Forget(id)
	if n.opts.EndSessions != nil {
		n.opts.EndSessions(id)
	}
	err := n.nm.Delete(ctx, id)
	return errors.Join(err, n.removeFiles(id))
}

// SetPolicy implements netattach.Network.
func (n *Node) SetPolicy(id string, generation int64, pol egress.Policy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.info[id]; ok {
		info := n.info[id]
		info.Generation, info.Policy = generation, pol
		n.info[id] = info
	}
}

// Reassign implements netattach.Reassigner: the maps the proxy reads for the session
// credential, connection limits and audit records take the new owner and role.
func (n *Node) Reassign(id, owner, role string, generation int64, pol egress.Policy) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	info, ok := n.info[id]
	if !ok {
		return false
	}
	info.Generation, info.Policy = generation, pol
	n.info[id] = info
	n.owners[id], n.roles[id] = owner, role
	return true
}

// Joined implements netattach.Joiner.
func (n *Node) Joined(id string) error { return n.nm.Joined(id) }

// List implements netattach.Network.
func (n *Node) List() ([]string, error) { return n.nm.List() }

// Link returns a sandbox's link (its addresses), if it has one.
func (n *Node) Link(id string) (*sandboxlink.Sandbox, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	l, ok := n.links[id]
	return l, ok
}

// ownDir makes dir searchable by the sandbox alone: root's, group the host gid of the
// sandbox's root, mode 0710. The sandbox (and runc, entering it as that uid and gid)
// reaches the files in it, cannot change what is there, and no other host user can
// reach them at all.
func ownDir(dir string, gid uint32) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(dir, 0, int(gid)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o710)
}

// The CA bundle is written alone in bundleDir and sandboxes bind it from a view of that
// directory (bundleView), which their mount table shows as /ca-bundle.pem.
const (
	bundleDir  = "ca-public"
	bundleView = "ca-view"
	bundleName = "ca-bundle.pem"
)

// writeBundle writes the host's CA bundle plus the node CA and the extra CAs (cas),
// which sandboxes trust, and returns the path sandboxes bind it from. The extra CAs are
// there because a connection whose TLS the proxy passes through is verified by the
// sandbox itself, against the roots the proxy would have used.
func writeBundle(dir string, cas ...[]byte) (string, error) {
	host, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	data := append([]byte{}, host...)
	for _, pem := range cas {
		data = append(append(data, '\n'), pem...)
	}
	pub := filepath.Join(dir, bundleDir)
	if err := os.MkdirAll(pub, 0o711); err != nil {
		return "", err
	}
	// Replaced whole (renamed into place), never written in place: a view's layer must
	// not change under it.
	if err := durable.EnsureFile(filepath.Join(pub, bundleName), data, 0o644); err != nil {
		return "", err
	}
	view, err := bindsource.View(filepath.Join(dir, bundleView), pub)
	if err != nil {
		return "", err
	}
	return filepath.Join(view, bundleName), nil
}

// hostResolver is the first nameserver of the host's resolv.conf.
func hostResolver() string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "127.0.0.1:53"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				return netip.AddrPortFrom(a, 53).String()
			}
		}
	}
	return "127.0.0.1:53"
}

// nodeAddrs lists the node's own addresses.
func nodeAddrs() []netip.Prefix {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Prefix
	for _, a := range addrs {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out
}

// RemoveRules deletes the node's firewall table; for a node going away for good (tests).
func (n *Node) RemoveRules() error { return n.nm.RemoveRules() }

// upstreamResolver resolves through the node's configured upstream, the same resolver
// the sandboxes' DNS forwards to, so a name means the same to both.
func upstreamResolver(upstream string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, upstream)
	}}
}

// Traffic implements netattach.TrafficCounter: every sandbox's bytes in and out, from
// the host side of its veth.
func (n *Node) Traffic() (map[string]netattach.Traffic, error) {
	c, err := n.nm.Counters()
	if err != nil {
		return nil, err
	}
	out := make(map[string]netattach.Traffic, len(c))
	for id, t := range c {
		out[id] = netattach.Traffic{RxBytes: t.RxBytes, TxBytes: t.TxBytes}
	}
	return out, nil
}
