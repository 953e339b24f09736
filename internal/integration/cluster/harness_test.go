package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/testenv"
)

// Cluster is several real nodes of one cluster (see the package doc): Node(i) reaches
// node i through its CLI, its socket (as the administrator) and its TCP API (as an
// owner); Kill and Restart stop and start one node's daemon as a lost or rebooted host
// would. Its cleanup, registered with the test, ends every sandbox, stops every daemon
// and removes all it made (namespaces, bridge, PostgreSQL, S3, mounts, cgroups), even
// when the test fails.
type Cluster struct {
	t testing.TB
	// Postgres is the store every node shares; DSN is the database, reachable from the
	// nodes' namespaces and from the test.
	Postgres *pgtest.Server
	DSN      string
	// S3 is the object store every node shares; Bucket is theirs.
	S3     *s3test.Server
	Bucket string
	// LeasePeriod is every node's node.lease_period.
	LeasePeriod time.Duration

	bin, daemon string // the CLI and the daemon binaries
	dir         string
	net         *fabric
	nodes       []*Node
	alone       []*Node // Options.Alone

	mu     sync.Mutex
	tokens map[string]string // owner -> token
}

// Options shape a cluster.
type Options struct {
	// Nodes is how many nodes (default 3).
	Nodes int
	// LeasePeriod is each node's node.lease_period (default 5s, the product's default:
	// on a loaded machine a 1s lease has lapsed between two renewals). Tests of node
	// loss ask for 1s, the shortest allowed.
	LeasePeriod time.Duration
	// Config lines are added to every node's configuration file.
	Config []string
	// NodeMemory is every node's node.memory ("": the host's memory).
	NodeMemory string
	// Alone is how many nodes of no cluster to start as well (Cluster.Alone): each
	// the same daemon on the same network, with its own SQLite store and no
	// store.dsn, objects, node or cluster settings, for comparisons.
	Alone int
}

// Node is one node of a Cluster: a real airlockd serve process in a network namespace
// of its own. Each carries the node label host=NAME: a create whose node selector is
// {host: NAME} is placed there.
type Node struct {
	c     *Cluster
	Index int
	// Name is node.name: node-0, node-1, ...
	Name string
	// Addr is the node's address on the cluster's network; API (ADDR:7070) is where its
	// TCP API listens, Advertise (ADDR:7443) is its node.listen and node.advertise, and
	// E2B (ADDR:7080) is its e2b_listen.
	Addr                netip.Addr
	API, Advertise, E2B string
	// Dir is the node's state directory; Socket its unix socket.
	Dir, Socket string
	// Client reaches the node over its socket, as root: the administrator "local".
	Client *client.Client

	ns                   netns.NsHandle
	alone                bool // of no cluster: SQLite, no node listener
	config               string
	cgroup, table, veths string
	secrets              string
	log                  testenv.LockedBuffer
	cmd                  *exec.Cmd
	exited               chan struct{} // closed once cmd has been waited for
}

// Ports every node uses on its own address.
const (
	apiPort  = 7070
	nodePort = 7443
	e2bPort  = 7080
)

// startTimeout bounds one daemon's start, on a loaded machine.
const startTimeout = 90 * time.Second

// s3 credentials reach the daemons through these environment variables.
const (
	s3AccessEnv = "AIRLOCK_TEST_S3_ACCESS_KEY"
	s3SecretEnv = "AIRLOCK_TEST_S3_SECRET_KEY"
)

// newCluster starts a cluster for t: the network, PostgreSQL, S3, then node-0 (which
// makes the cluster's keys) and the others at once, each ready to take calls.
func newCluster(t testing.TB, opts ...Options) *Cluster {
	t.Helper()
	testenv.RequireHost(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		if testenv.InCI() {
			t.Fatal("needs nsenter (apt-get install -y util-linux)")
		}
		t.Skip("needs nsenter (apt-get install -y util-linux)")
	}
	o := Options{Nodes: 3, LeasePeriod: 5 * time.Second}
	for _, x := range opts {
		if x.Nodes > 0 {
			o.Nodes = x.Nodes
		}
		if x.LeasePeriod > 0 {
			o.LeasePeriod = x.LeasePeriod
		}
		o.Config = append(o.Config, x.Config...)
		if x.NodeMemory != "" {
			o.NodeMemory = x.NodeMemory
		}
		o.Alone += x.Alone
	}
	bin := testenv.Binary(t)
	c := &Cluster{t: t, bin: bin, daemon: filepath.Join(filepath.Dir(bin), "airlockd"), LeasePeriod: o.LeasePeriod,
		tokens: map[string]string{}}
	c.dir = testenv.TempDir(t, "al-cl-")
	t.Cleanup(func() { os.RemoveAll(c.dir) }) // last: every other cleanup is registered later
	c.net = newFabric(t)
	c.Postgres = pgtest.StartOn(t, netip.PrefixFrom(c.net.host, c.net.prefix.Bits()))
	c.DSN = c.Postgres.CreateDatabase(t)
	c.S3 = s3test.StartOn(t, c.net.host)
	tag := c.net.hostLink[len(c.net.hostLink)-4:]
	c.Bucket = "airlock-" + tag
	keys := filepath.Join(c.dir, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	join := make([]byte, 32)
	crand.Read(join)
	for i := range o.Nodes {
		n := c.addNode(t, i, tag, keys, hex.EncodeToString(join), o, false)
		c.nodes = append(c.nodes, n)
	}
	for i := range o.Alone {
		c.alone = append(c.alone, c.addNode(t, o.Nodes+i, tag, keys, "", o, true))
	}
	t.Cleanup(c.close) // first: before the network, the store and S3 go
	c.nodes[0].start()
	var wg sync.WaitGroup
	rest := append(c.nodes[1:len(c.nodes):len(c.nodes)], c.alone...)
	errs := make([]error, len(rest))
	for i, n := range rest {
		wg.Go(func() { errs[i] = n.startErr() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// addNode writes node i's configuration and sweep record; a node alone keeps its own
// SQLite store, of no cluster.
func (c *Cluster) addNode(t testing.TB, i int, tag, keys, join string, o Options, alone bool) *Node {
	ns, addr := c.net.addNode(t, i)
	name := fmt.Sprintf("node-%d", i)
	if alone {
		name = fmt.Sprintf("alone-%d", i)
	}
	n := &Node{c: c, Index: i, Name: name, Addr: addr, ns: ns, alone: alone,
		API:       net.JoinHostPort(addr.String(), strconv.Itoa(apiPort)),
		Advertise: net.JoinHostPort(addr.String(), strconv.Itoa(nodePort)),
		E2B:       net.JoinHostPort(addr.String(), strconv.Itoa(e2bPort)),
		Dir:       filepath.Join(c.dir, fmt.Sprintf("n%d", i)),
		cgroup:    fmt.Sprintf("airlock-test-cl%s-%d", tag, i),
		table:     fmt.Sprintf("airlock_k%s%d", tag, i), veths: fmt.Sprintf("k%s%d", tag, i)}
	n.Socket, n.config, n.secrets = filepath.Join(n.Dir, "api.sock"), filepath.Join(c.dir, n.Name+".yaml"), n.Dir+"-secrets"
	if err := os.Mkdir(n.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	// A test process killed before its cleanups leaves this to the next one's Sweep.
	if err := sweep.WriteRecord(n.Dir, n.record()); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`state_dir: %s
secrets_dir: %s
socket: %s
listen: %s
e2b_listen: %s
cgroup_parent: %s
log_level: info
min_max_lifetime: 1s
live_cap: 1000
network: {enabled: true, table: %s, host_prefix: %s, upstream_dns: "127.0.0.1:9"}
default_limits: {cpu: 1, memory: 128MiB, pids: 512, open_files: 1024, disk: 512MiB}
`, n.Dir, n.secrets, n.Socket, n.API, n.E2B, n.cgroup, n.table, n.veths)
	if !alone {
		cfg += fmt.Sprintf(`store: {dsn: %q}
objects: {endpoint: %q, bucket: %s, region: us-east-1, access_key_env: %s, secret_key_env: %s}
node: {name: %s, listen: %q, advertise: %q, lease_period: %s%s, labels: {host: %s}}
cluster: {join_token: %s, keys_dir: %s}
`, c.DSN, c.S3.Endpoint, c.Bucket, s3AccessEnv, s3SecretEnv, n.Name, n.Advertise, n.Advertise, c.LeasePeriod, nodeMemory(o.NodeMemory), n.Name, join, keys)
	}
	if rt := os.Getenv("AIRLOCK_TEST_RUNTIME"); rt != "" {
		cfg += "default_runtime: " + rt + "\n"
	}
	cfg += strings.Join(o.Config, "\n") + "\n"
	if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if n.Client, err = client.New(client.Options{Socket: n.Socket}); err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeMemory is the node.memory entry of a node's configuration, if any.
func nodeMemory(m string) string {
	if m == "" {
		return ""
	}
	return ", memory: " + m
}

// record is what the node makes outside its state directory.
func (n *Node) record() sweep.Record {
	return sweep.Record{CgroupParents: []string{n.cgroup, n.cgroup + "-runsc"},
		Runtimes: []sweep.Runtime{{Binary: "runc", Root: filepath.Join(n.Dir, "runc")}, {Binary: "runsc", Root: filepath.Join(n.Dir, "runsc")}},
		// The table and veths are in the node's own namespace; they name its host locks.
		Table: n.table, VethPrefix: n.veths, SecretsDir: n.secrets}
}

// Node returns node i (from 0).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes returns every node of the cluster.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Alone returns node i (from 0) of those of no cluster (Options.Alone).
func (c *Cluster) Alone(i int) *Node { return c.alone[i] }

// Kill ends node i as a host that dies does: its daemon gets SIGKILL and its
// containers are killed and deleted; its state directory (records, upper layers)
// stays, as a disk does.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	n := c.nodes[i]
	n.stop(syscall.SIGKILL)
	for _, rt := range n.record().Runtimes {
		if _, err := os.Stat(rt.Root); err != nil {
			continue
		}
		bin := rt.Binary
		if bin == "runsc" {
			if bin = os.Getenv("AIRLOCK_TEST_RUNSC"); bin == "" {
				bin = "runsc"
			}
		}
		out, _ := exec.Command(bin, "--root", rt.Root, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command(bin, "--root", rt.Root, "delete", "--force", id).CombinedOutput(); err != nil {
				c.t.Errorf("kill %s's container %s: %v: %s", n.Name, id, err, b)
			}
		}
	}
}

// Restart stops node i's daemon (SIGTERM) if it runs and starts it again.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.nodes[i].stop(syscall.SIGTERM)
	c.nodes[i].start()
}

// Owner returns the token of owner, a user with the developer role, made on first use.
func (c *Cluster) Owner(owner string) string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok, ok := c.tokens[owner]; ok {
		return tok
	}
	ctx := context.Background()
	admin := c.nodes[0].Client
	if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: owner, Roles: []string{"developer"}}); err != nil {
		c.t.Fatalf("make user %s: %v", owner, err)
	}
	tok, err := admin.CreateToken(ctx, api.CreateTokenRequest{User: owner, Name: "test"})
	if err != nil {
		c.t.Fatalf("make a token for %s: %v", owner, err)
	}
	c.tokens[owner] = tok.Secret
	return tok.Secret
}

// As returns a client of the node's TCP API as owner (see Cluster.Owner).
func (n *Node) As(owner string) *client.Client {
	n.c.t.Helper()
	cl, err := client.New(client.Options{Addr: n.API, Token: n.c.Owner(owner)})
	if err != nil {
		n.c.t.Fatal(err)
	}
	return cl
}

// CLI runs the airlock CLI against the node's socket.
func (n *Node) CLI(args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return testenv.Run(exec.CommandContext(ctx, n.c.bin, append([]string{"--socket", n.Socket}, args...)...))
}

// MustCLI is CLI that fails the test unless the command succeeds; it returns stdout.
func (n *Node) MustCLI(args ...string) string {
	n.c.t.Helper()
	out, errOut, code := n.CLI(args...)
	if code != 0 {
		n.c.t.Fatalf("airlock %s on %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), n.Name, code, out, errOut)
	}
	return out
}

// Log is what the node's daemon has written so far, over all its starts.
func (n *Node) Log() string { return n.log.String() }

// Running reports whether the node's daemon runs.
func (n *Node) Running() bool { return n.cmd != nil }

func (n *Node) start() {
	n.c.t.Helper()
	if err := n.startErr(); err != nil {
		n.c.t.Fatal(err)
	}
}

// startErr starts the daemon in the node's namespace (nsenter enters only the
// network namespace and then is the daemon: its pid is the daemon's) and waits until
// its socket answers.
func (n *Node) startErr() error {
	cmd := exec.Command("nsenter", "--net="+nsPath(n.ns), n.c.daemon, "serve", "--config", n.config)
	cmd.Env = append(os.Environ(), s3AccessEnv+"="+n.c.S3.AccessKey, s3SecretEnv+"="+n.c.S3.SecretKey)
	fmt.Fprintf(&n.log, "--- start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = &n.log, &n.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", n.Name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.Client.Status(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			n.cmd = nil
			return fmt.Errorf("%s exited at start:\n%s", n.Name, tail(n.Log()))
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.stop(syscall.SIGKILL)
	return fmt.Errorf("%s did not answer on its socket within %v:\n%s", n.Name, startTimeout, tail(n.Log()))
}

// stop signals the daemon and waits until it exited; a daemon that does not stop on
// SIGTERM within a minute gets SIGKILL.
func (n *Node) stop(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	cmd, done := n.cmd, n.exited
	n.cmd = nil
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(time.Minute):
		n.c.t.Errorf("%s did not stop on %v within a minute; killing it", n.Name, sig)
		cmd.Process.Kill()
		<-done
	}
}

// close ends every sandbox through the node that holds it (starting nodes that were
// killed, so they can), stops every daemon, fails the test on anything a node left on
// the host, and removes it all whatever happened.
func (c *Cluster) close() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, n := range append(c.nodes[:len(c.nodes):len(c.nodes)], c.alone...) {
		if !n.Running() {
			if err := n.startErr(); err != nil {
				t.Errorf("start %s again to end its sandboxes: %v", n.Name, err)
			}
		}
	}
	byNode := map[string]*Node{}
	for _, n := range c.nodes {
		byNode[n.Name] = n
	}
	c.endAll(ctx, c.nodes[0], func(sb api.Sandbox) *Node { return byNode[sb.Node] })
	for _, n := range c.alone {
		c.endAll(ctx, n, func(api.Sandbox) *Node { return n })
	}
	all := append(c.nodes[:len(c.nodes):len(c.nodes)], c.alone...)
	for _, n := range all {
		n.stop(syscall.SIGTERM)
	}
	for _, n := range all {
		n.assertClean(t)
		// Whatever is left goes now, reported above or not.
		sweep.Run(ctx, n.Dir, n.record(), false, nil)
		if err := secret.Unmount(n.secrets); err != nil {
			t.Errorf("unmount %s's secrets tmpfs: %v", n.Name, err)
		}
		testenv.RemoveHostLocks(sweep.HostLockNames(n.record())...)
		if t.Failed() {
			t.Logf("%s's log:\n%s", n.Name, tail(n.Log()))
		}
	}
}

// endAll terminates every sandbox that node lists, each through the node holding it.
func (c *Cluster) endAll(ctx context.Context, lister *Node, holder func(api.Sandbox) *Node) {
	if !lister.Running() {
		return
	}
	list, err := lister.Client.List(ctx, client.ListOptions{AllOwners: true})
	if err != nil {
		c.t.Errorf("list the sandboxes through %s to end them: %v", lister.Name, err)
	}
	for _, sb := range list {
		n := holder(sb)
		if sb.State == api.StateTerminated || n == nil || !n.Running() {
			continue
		}
		if _, err := n.Client.Terminate(ctx, sb.ID); err != nil && !client.IsNotFound(err) {
			c.t.Errorf("terminate %s (%s) on %s: %v", sb.Name, sb.ID, n.Name, err)
		}
	}
}

// assertClean fails the test on any container, mount, sandbox directory or cgroup of
// the node's still on the host.
func (n *Node) assertClean(t testing.TB) {
	t.Helper()
	for _, rt := range n.record().Runtimes[:1] {
		out, _ := exec.Command(rt.Binary, "--root", rt.Root, "list", "-q").Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			t.Errorf("%s left containers: %v", n.Name, ids)
		}
	}
	if m := testenv.MountsUnder(n.Dir); len(m) > 0 {
		t.Errorf("%s left mounts: %v", n.Name, m)
	}
	entries, _ := os.ReadDir(filepath.Join(n.Dir, "sandboxes"))
	for _, e := range entries {
		t.Errorf("%s left a sandbox directory: %s", n.Name, e.Name())
	}
	for _, cg := range testenv.CgroupDirs(n.cgroup) {
		sub, _ := os.ReadDir(cg)
		for _, e := range sub {
			if e.IsDir() {
				t.Errorf("%s left a cgroup: %s/%s", n.Name, cg, e.Name())
			}
		}
		os.Remove(cg)
	}
}

// tail is the end of a log.
func tail(s string) string { return s[max(0, len(s)-12000):] }

// nodeList is `airlock node ls -o json` through node n.
func (n *Node) nodeList(t *testing.T) []api.Node {
	t.Helper()
	var nodes []api.Node
	if err := json.Unmarshal([]byte(n.MustCLI("node", "ls", "-o", "json")), &nodes); err != nil {
		t.Fatalf("node ls -o json on %s: %v", n.Name, err)
	}
	return nodes
}
