// Package testenv owns the harness of Airlock's tests that need the real host parts:
// root, runc, overlayfs, cgroups and namespaces. It builds the airlock binary once per
// test process, starts a whole node in a private state directory and cgroup parent, and
// at the end removes every sandbox and asserts that nothing was left behind. Tests that
// cannot run here skip with a reason, except in CI (CI=true), where they fail.
// NewFakeNode starts a node on the fake runtime (runtime/fake), which needs no root.
//
// Every node is assembled by daemon.Assemble from a typed configuration, as `airlock
// serve` assembles its own, with only the runtime and secret delivery substituted; it
// must not wire a node's parts (store, identities, audit chain, planes, network) itself.
package testenv

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/manager"
	airlockrt "github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/runtime/oci"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/version"
)

// InCI reports whether the tests run in CI, where missing host parts are failures.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireHost skips (or, in CI, fails) unless root and runc are available.
func RequireHost(t testing.TB) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing = append(missing, "runc (apt-get install -y runc)")
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs " + strings.Join(missing, " and ")
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RequireVolumes skips (or, in CI, fails) unless the host can hold volumes: root (loop
// devices, mounts) and e2fsprogs.
func RequireVolumes(t testing.TB) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("resize2fs"); err != nil {
		missing = append(missing, "e2fsprogs (apt-get install -y e2fsprogs)")
	}
	if len(missing) == 0 {
		return
	}
	msg := "volumes need " + strings.Join(missing, " and ")
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the binaries of cmd/ (static: airlock, airlockd, airlock-agent) into one
// directory once per test process and returns airlock's path: airlock serve runs the
// airlockd beside it, which installs the airlock-agent beside it into sandboxes.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := markedDir("airlock-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "airlock")
		cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// AgentBinary is the binary a test's driver installs into sandboxes, as the daemon does:
// airlock-agent, built beside Binary's airlock.
func AgentBinary(t testing.TB) string {
	return filepath.Join(filepath.Dir(Binary(t)), version.AgentBinary)
}

// Main first removes what test processes that were killed left on the host (Sweep),
// then runs a package's tests, and then removes the binary Binary built, if any: call
// it from TestMain (os.Exit(testenv.Main(m))). A little before go test's -timeout,
// which would panic without running cleanups, it removes what this process's nodes
// made and exits instead, with every goroutine's stack.
func Main(m *testing.M) int {
	Sweep(os.Stderr)
	stop := processWatchdog()
	code := m.Run()
	stop()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}

// Node is a whole Airlock node running in the test process, assembled as `airlock
// serve` assembles one (daemon.Assemble), on the real runtimes.
type Node struct {
	*daemon.Node
	Dir          string
	Socket       string
	CgroupParent string
	// Config is the configuration the node was assembled from.
	Config config.Config
	// Driver is the node's runc driver.
	Driver *oci.Driver
	// SecretsDir is the tmpfs delivered secrets live on, outside Dir.
	SecretsDir string
	Client     *client.Client
	// Ctx ends at the test's deadline (see Watchdog).
	Ctx context.Context

	tcpAddr string
	tokens  map[string]string // owner -> token
}

// As returns a client of the node's API as owner, one of Options.Owners, over TCP.
func (n *Node) As(t testing.TB, owner string) *client.Client {
	t.Helper()
	tok, ok := n.tokens[owner]
	if !ok {
		t.Fatalf("owner %q is not one of the node's Options.Owners", owner)
	}
	c, err := client.New(client.Options{Addr: n.tcpAddr, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Options adjust a node.
type Options struct {
	Config func(*manager.Config)
	// Network gives sandboxes real networking (namespace, veth, nftables, egress proxy
	// and DNS), in a subnet, veth prefix and nftables table of the node's own.
	Network bool
	// UpstreamDNS is the resolver the node's DNS forwards allowed names to.
	UpstreamDNS string
	// ExtraCAs are CA files upstream test servers are signed by.
	ExtraCAs []string
	// MaxConns caps each sandbox's open connections to the proxy (0: the default).
	MaxConns int
	// Owners are owners other than "local" (the socket's) who reach the node over TCP
	// with a token of their own; Node.As returns a client for one.
	Owners []string
	// Runtime "runsc" adds a gVisor driver and makes it the default; sandboxes can still
	// ask for runc.
	Runtime string
	// WrapDriver, when set, stands between the manager and the node's real driver (a
	// test that replaces some sandboxes' agents).
	WrapDriver func(airlockrt.Driver) airlockrt.Driver
	// LogTo, when set, also receives the node's log, at debug level (a test that
	// scans everything the daemon says).
	LogTo io.Writer
}

// NewNode starts a node; its cleanup terminates every sandbox and fails the test if any
// container, mount, cgroup or directory is left.
func NewNode(t testing.TB, opts ...Options) *Node {
	t.Helper()
	RequireHost(t)
	bin := AgentBinary(t)
	dir := TempDir(t, "al-")
	n := &Node{Dir: dir, Socket: filepath.Join(dir, "api.sock"), CgroupParent: "airlock-test-" + filepath.Base(dir),
		SecretsDir: dir + "-secrets"} // delivered secrets live on a tmpfs outside the state directory, as on a real node
	var tb [2]byte
	crand.Read(tb[:]) // the table and veth prefix of nodes made in one tick differ too
	tag := fmt.Sprintf("%02x%02x", tb[0], tb[1])
	rec := sweep.Record{CgroupParents: []string{n.CgroupParent, n.CgroupParent + "-runsc"},
		Runtimes:   []sweep.Runtime{{Binary: "runc", Root: filepath.Join(dir, "runc")}, {Binary: "runsc", Root: filepath.Join(dir, "runsc")}},
		SecretsDir: n.SecretsDir}
	for _, o := range opts {
		if o.Network {
			rec.Table, rec.VethPrefix = "airlock_t"+tag, "t"+tag
		}
	}
	if err := sweep.WriteRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, o := range opts {
		if o.LogTo != nil {
			log = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, o.LogTo), &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	cfg := nodeConfig(dir, n.SecretsDir, n.Socket)
	cfg.CgroupParent = n.CgroupParent
	cfg.DefaultLimits.Memory, cfg.DefaultLimits.Disk, cfg.TmpfsSize = "256MiB", "1GiB", "64MiB"
	for _, o := range opts {
		if !o.Network {
			continue
		}
		upstream := o.UpstreamDNS
		if upstream == "" {
			upstream = "127.0.0.1:9" // nothing answers: allowed names fail, nothing leaves the host
		}
		cfg.Network = config.Network{Enabled: true, Subnet: freeSubnet(t).String(), Table: rec.Table, HostPrefix: rec.VethPrefix,
			UpstreamDNS: upstream, ExtraCAs: o.ExtraCAs, MaxConnections: o.MaxConns}
	}
	if rt := os.Getenv("AIRLOCK_TEST_RUNTIME"); rt != "" {
		opts = append(opts, Options{Runtime: rt})
	}
	for _, o := range opts {
		if o.Runtime == "runsc" {
			cfg.Runsc, cfg.DefaultRuntime = Runsc(t), "runsc"
		}
	}
	var owners []string
	for _, o := range opts {
		owners = append(owners, o.Owners...)
	}
	dopts := daemon.Options{Log: log, Version: "test", AgentBinary: bin,
		Manager: func(c *manager.Config) {
			for _, o := range opts {
				if o.Config != nil {
					o.Config(c)
				}
			}
		},
		WrapDriver: func(d airlockrt.Driver) airlockrt.Driver {
			for _, o := range opts {
				if o.WrapDriver != nil {
					d = o.WrapDriver(d)
				}
			}
			return d
		}}
	node, err := daemon.Assemble(context.Background(), cfg, dopts)
	if err != nil {
		t.Fatal(err)
	}
	n.Node, n.Config, n.Driver = node, cfg, node.Runc
	n.tokens = addOwners(t, n.Node, owners)
	var hs *http.Server
	hs, n.tcpAddr, n.Client = serve(t, n.Node, n.Socket, len(owners) > 0)
	// A test still running at its deadline fails, and its calls to the node fail
	// with it, so that it ends and the cleanup below removes its sandboxes.
	n.Ctx = Watchdog(t, func() { hs.Close() })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hs.Close()
		terminateAll(ctx, t, n.Store, n.Manager)
		if n.Network != nil {
			if ids, _ := n.Network.List(); len(ids) > 0 {
				t.Errorf("sandbox networks left: %v", ids)
				for _, id := range ids {
					n.Network.Detach(ctx, id)
				}
			}
			n.Network.RemoveRules()
		}
		n.Node.Close()
		n.AssertNoLeaks(t)
		if err := secret.Unmount(n.SecretsDir); err != nil {
			t.Errorf("unmount the secrets tmpfs: %v", err)
		}
		os.RemoveAll(n.SecretsDir)
		os.RemoveAll(dir)
	})
	return n
}

// nodeConfig is the configuration of a test's node: the defaults, with its state,
// secrets and socket where the test says, the test's own user an administrator over
// the socket as root is, no sandbox networking and no runsc.
func nodeConfig(dir, secretsDir, socket string) config.Config {
	cfg := config.Default()
	cfg.StateDir, cfg.SecretsDir, cfg.Socket = dir, secretsDir, socket
	cfg.UnixUsers = map[int]string{os.Getuid(): config.LocalOwner}
	cfg.Network.Enabled = false
	cfg.Runsc = "off"
	cfg.Node.Name = "node-1"    // not the host's name: the same output on every machine
	cfg.Metrics.Interval = "1s" // usage moves within a second of the work that moves it
	return cfg
}

// AssertNoLeaks fails the test if the node's driver still has any sandbox resource.
func (n *Node) AssertNoLeaks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	drivers := []airlockrt.Driver{n.Driver}
	parents := []string{n.CgroupParent}
	if n.Runsc != nil {
		drivers, parents = append(drivers, n.Runsc), append(parents, n.CgroupParent+"-runsc")
	}
	for _, d := range drivers {
		ids, err := d.List(ctx)
		if err != nil {
			t.Errorf("list driver resources: %v", err)
		}
		if len(ids) > 0 {
			t.Errorf("sandbox resources left on the host: %v", ids)
			for _, id := range ids {
				d.Delete(ctx, id)
			}
		}
	}
	if m := MountsUnder(n.Dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, parent := range parents {
		for _, d := range CgroupDirs(parent) {
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("cgroup left: %s", filepath.Join(d, e.Name()))
				}
			}
			os.Remove(d)
		}
	}
}

// Runsc returns a runsc that can run sandboxes here, or skips the test (fails it in
// CI, whose set-up installs one).
func Runsc(t testing.TB) string {
	t.Helper()
	path, ok := gvisor.Find()
	msg := "needs runsc on PATH (scripts/deps.sh builds it)"
	if ok {
		c := gvisor.Check(context.Background(), path)
		if c.OK {
			return path
		}
		msg = "runsc cannot run here: " + c.Detail + ": " + c.Degrades
	}
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Create makes a sandbox through the API and fails the test on error.
func (n *Node) Create(t testing.TB, req api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	resp, err := n.Client.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Name, err)
	}
	return resp.Sandbox
}

// Exec runs a shell command and returns its result, failing the test on an API error.
func (n *Node) Exec(t testing.TB, ref, shell string) *api.ExecResult {
	t.Helper()
	res, err := n.Client.Exec(context.Background(), ref, api.ExecRequest{Shell: shell, Timeout: "60s"})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", shell, ref, err)
	}
	return res
}

// MountsUnder lists mount points at or below dir.
func MountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// SandboxMountsUnder is MountsUnder less the node's own mounts (NodeMount).
func SandboxMountsUnder(dir string) []string {
	var out []string
	for _, m := range MountsUnder(dir) {
		if !NodeMount(m) {
			out = append(out, m)
		}
	}
	return out
}

// NodeMount says whether the mount point m is one a running node keeps for itself,
// which go when the node closes: the views every sandbox binds files from (the agent
// binary's, the CA bundle's; see bindsource), the ready disk images of its disk
// pools (disk-pool*/N.mnt), and the one tmpfs holding every sandbox's client files
// (network/files, which outlives a node only while a sandbox has files on it).
func NodeMount(m string) bool {
	return strings.HasSuffix(m, "-agent/view") || strings.HasSuffix(m, "/network/ca-view/view") ||
		strings.HasSuffix(m, "/network/files") ||
		strings.HasPrefix(filepath.Base(filepath.Dir(m)), "disk-pool") && strings.HasSuffix(m, ".mnt")
}

// RemoveHostLocks removes the lock files a root daemon of a test took for its host
// names (see internal/daemon's lockHostNames): "cgroup-NAME", "nftables-TABLE",
// "veth-PREFIX". A daemon leaves them, as a lock file must stay where it is.
func RemoveHostLocks(names ...string) {
	for _, n := range names {
		os.Remove(filepath.Join("/run/airlock.names", n+".lock"))
	}
}

// CgroupDirs lists the host directories of a cgroup parent in every hierarchy.
func CgroupDirs(parent string) []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", parent)}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		d := filepath.Join("/sys/fs/cgroup", e.Name(), parent)
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// serve serves node's API on a unix socket at socket (and on loopback TCP when tcp is
// set, returning its address) and returns a client of the socket.
func serve(t testing.TB, node *daemon.Node, socket string, tcp bool) (*http.Server, string, *client.Client) {
	t.Helper()
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	hs := node.APIServer()
	go hs.Serve(ln)
	addr := ""
	if tcp {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = tl.Addr().String()
		go hs.Serve(tl)
	}
	c, err := client.New(client.Options{Socket: socket})
	if err != nil {
		t.Fatal(err)
	}
	return hs, addr, c
}

// terminateAll terminates every sandbox of m's node the store holds that is not terminated yet, and
// waits until their resources are removed.
func terminateAll(ctx context.Context, t testing.TB, st store.Store, m *manager.Manager) {
	list, _ := st.ListSandboxes(ctx, store.SandboxFilter{})
	for _, sb := range list {
		if sb.State != manager.Terminated && (sb.Node == "" || sb.Node == m.NodeName()) { // another node's are its own cleanup's
			if _, _, err := m.Terminate(ctx, manager.Call{Owner: sb.Owner}, sb.ID); err != nil {
				t.Errorf("terminate %s: %v", sb.Name, err)
			}
		}
	}
	if err := m.WaitCleanups(ctx); err != nil {
		t.Errorf("wait for the cleanups of terminated sandboxes: %v", err)
	}
}

// addOwners gives each of owners a user with the developer role and a token on node
// (returned by owner).
func addOwners(t testing.TB, node *daemon.Node, owners []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	tokens := map[string]string{}
	for _, owner := range owners {
		if _, err := node.Auth.CreateIdentity(ctx, owner, "user", []string{"developer"}, nil); err != nil {
			t.Fatal(err)
		}
		secret, _, err := node.Auth.CreateToken(ctx, owner, "test", 0)
		if err != nil {
			t.Fatal(err)
		}
		tokens[owner] = secret
	}
	return tokens
}

// freeSubnet picks a /24 of 10.211.0.0/16 for a node's sandbox links (FreeSubnet).
func freeSubnet(t testing.TB) netip.Prefix { return FreeSubnet(t, 211) }

// FreeSubnet picks a /24 of 10.PLANE.0.0/16 that no interface of the host has an
// address in, so that nodes (or networks) of tests running at once (other packages,
// other test processes) get links of their own.
func FreeSubnet(t testing.TB, plane byte) netip.Prefix {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		var b [1]byte
		crand.Read(b[:])
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, plane, b[0], 0}), 24)
		taken := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && p.Contains(ip.Unmap()) {
					taken = true
				}
			}
		}
		if !taken {
			return p
		}
	}
	t.Fatalf("no free /24 in 10.%d.0.0/16", plane)
	return netip.Prefix{}
}

// Run runs cmd and returns its stdout, its stderr and its exit code: -1, with the
// reason as stderr, when it could not run.
func Run(cmd *exec.Cmd) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}
