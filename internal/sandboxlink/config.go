package sandboxlink

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Config says where a Manager puts its namespaces, which addresses it hands out and
// which ports of the node's egress proxy and DNS server sandboxes may reach.
type Config struct {
	// Subnet is carved into one link of LinkPrefixLen per sandbox, e.g. 10.203.0.0/16.
	// IPv4 only; it must not overlap any other network of the node.
	Subnet netip.Prefix
	// LinkPrefixLen is each sandbox link's prefix: 30 (the default when zero: host .1,
	// sandbox .2) or 31 (host .0, sandbox .1; twice as many sandboxes per subnet).
	LinkPrefixLen int
	// HostPrefix starts the name of every host-side veth, e.g. "al"; at most 7
	// characters, since the name is HostPrefix plus the link's host address in 8 hex
	// digits ("al0acb0001").
	HostPrefix string
	// RunDir holds one bind-mounted netns file per sandbox, named by its id; the
	// Manager owns the directory. It should sit on a shared mount (as /run does).
	RunDir string
	// ProxyPort is the egress proxy's HTTP/CONNECT port on each link's host address.
	ProxyPort int
	// TransparentHTTPPort and TransparentTLSPort receive the sandbox's TCP port 80 and
	// 443 traffic to any destination, redirected to the link's host address.
	TransparentHTTPPort, TransparentTLSPort int
	// TransparentTCPPort receives every other TCP connection a sandbox opens to anything
	// but its link's host address, redirected there too; the proxy decides it by the
	// original destination's address and port.
	TransparentTCPPort int
	// DNSPort is the DNS server's port (UDP and TCP) on each link's host address; port
	// 53 of that address is redirected to it.
	DNSPort int
	// HostNetns is the path of the network namespace that plays the host's part (the
	// host-side veths and the nftables table live there). Empty means the daemon's own;
	// tests set it to a namespace they made.
	HostNetns string
	// Table names the nftables table (inet family) of this node's rules (default
	// "airlock"); separate nodes on one host (tests) need separate tables.
	Table string
	// NewFlowRate is how many new connections (and DNS flows) one sandbox may open a
	// second, with bursts of twice that (0: DefaultNewFlowRate); NodeNewFlowRate bounds
	// all sandboxes together (0: DefaultNodeNewFlowRate). Every flow a sandbox opens is
	// an entry in the host's connection-tracking table, which the whole host shares:
	// these rates, with the short timeouts the rules give a sandbox's closing flows,
	// keep sandboxes from filling it. Packets over a rate are dropped, so a client's
	// connection attempt waits and retries instead of failing.
	NewFlowRate, NodeNewFlowRate int
	// ListenerMark is the SO_MARK the node's proxy and DNS sockets carry (MarkSocket),
	// by which the rules keep every other interface from opening connections to them:
	// one ReserveMark gave, so that no other table on the host matches on it. Zero
	// makes New reserve one (Manager.ListenerMark says which).
	ListenerMark uint32
}

// DefaultNewFlowRate and DefaultNodeNewFlowRate are the new-flow rates, per second,
// of one sandbox and of all of them together, unless configured otherwise. At the
// node's rate and the longest closing timeout (flowTimeouts), the closing flows
// sandboxes can leave in the host's table stay under about 120 000 entries, under
// half of a default nf_conntrack_max of 262 144; open connections are bounded
// apart from this, by the egress listeners' connection caps.
const (
	DefaultNewFlowRate     = 200
	DefaultNodeNewFlowRate = 2000
	maxFlowRate            = 1_000_000
)

var ifPrefixRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9]{0,6}$`) })

// Validate reports the first thing wrong with c, as an invalid-argument error.
func (c Config) Validate() error {
	if !c.Subnet.IsValid() || !c.Subnet.Addr().Is4() {
		return errdefs.Invalid("netns: subnet %v is not an IPv4 prefix", c.Subnet)
	}
	if l := c.linkBits(); l != 30 && l != 31 {
		return errdefs.Invalid("netns: link prefix length %d is not 30 or 31", c.LinkPrefixLen)
	}
	if c.Subnet.Bits() > c.linkBits() {
		return errdefs.Invalid("netns: subnet %v is smaller than one /%d link", c.Subnet, c.linkBits())
	}
	if !ifPrefixRE().MatchString(c.HostPrefix) {
		return errdefs.Invalid("netns: host interface prefix %q is not 1-7 lower-case letters and digits", c.HostPrefix)
	}
	if !filepath.IsAbs(c.RunDir) {
		return errdefs.Invalid("netns: run directory %q is not an absolute path", c.RunDir)
	}
	if c.ListenerMark != 0 && !validMark(c.ListenerMark) {
		return errdefs.Invalid("netns: listener mark %#x is not one of %#x-%#x", c.ListenerMark, markBase, markBase+markCount-1)
	}
	for _, r := range []struct {
		name string
		rate int
	}{{"new connection rate per sandbox", c.NewFlowRate}, {"new connection rate of the node", c.NodeNewFlowRate}} {
		if r.rate < 0 || r.rate > maxFlowRate {
			return errdefs.Invalid("netns: %s %d is not from 1 to %d a second (0: the default)", r.name, r.rate, maxFlowRate)
		}
	}
	for _, p := range []struct {
		name string
		port int
	}{
		{"proxy", c.ProxyPort}, {"transparent HTTP", c.TransparentHTTPPort},
		{"transparent TLS", c.TransparentTLSPort}, {"transparent TCP", c.TransparentTCPPort}, {"DNS", c.DNSPort},
	} {
		if p.port < 1 || p.port > 65535 {
			return errdefs.Invalid("netns: %s port %d is not in 1-65535", p.name, p.port)
		}
	}
	return nil
}

func (c Config) flowRates() (sandbox, node int) {
	sandbox, node = c.NewFlowRate, c.NodeNewFlowRate
	if sandbox == 0 {
		sandbox = DefaultNewFlowRate
	}
	if node == 0 {
		node = DefaultNodeNewFlowRate
	}
	return sandbox, node
}

func (c Config) linkBits() int {
	if c.LinkPrefixLen == 0 {
		return 30
	}
	return c.LinkPrefixLen
}

// slots is how many sandbox links fit in the subnet.
func (c Config) slots() int { return 1 << (c.linkBits() - c.Subnet.Bits()) }

// slotAddrs returns the host-side and sandbox-side addresses of link i.
func (c Config) slotAddrs(i int) (host, sandbox netip.Addr) {
	b := c.Subnet.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(i)<<(32-c.linkBits())
	if c.linkBits() == 30 {
		v++ // skip the network address
	}
	return addrFrom(v), addrFrom(v + 1)
}

// slotOf returns the link that host is the host-side address of.
func (c Config) slotOf(host netip.Addr) (int, bool) {
	if !host.Is4() || !c.Subnet.Contains(host) {
		return 0, false
	}
	b, base := host.As4(), c.Subnet.Masked().Addr().As4()
	off := binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(base[:])
	i := int(off >> (32 - c.linkBits()))
	if h, _ := c.slotAddrs(i); h != host {
		return 0, false
	}
	return i, true
}

func addrFrom(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// firstSlot is the link index sandbox id tries first: from its hash, so that an id
// tends to get the same addresses again and ids spread over the subnet.
func (c Config) firstSlot(id string) int {
	h := sha256.Sum256([]byte(id))
	return int(binary.BigEndian.Uint32(h[:4]) % uint32(c.slots()))
}

// hostIfName names the host-side veth of the link whose host address is host:
// HostPrefix plus the address in 8 hex digits. A link index has one owner at a time,
// so names never collide, and a name says which link it is.
func (c Config) hostIfName(host netip.Addr) string {
	b := host.As4()
	return c.HostPrefix + hex.EncodeToString(b[:])
}

// slotOfIf returns the link index a host-side veth name stands for.
func (c Config) slotOfIf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, c.HostPrefix)
	b, err := hex.DecodeString(rest)
	if !ok || err != nil || len(b) != 4 {
		return 0, false
	}
	return c.slotOf(netip.AddrFrom4([4]byte(b)))
}

// netnsPath is where sandbox id's namespace is bind-mounted.
func (c Config) netnsPath(id string) string { return filepath.Join(c.RunDir, id) }

// sandboxIf is the name of the sandbox-side veth inside its namespace.
const sandboxIf = "eth0"

// aliasPrefix labels a host-side veth as Airlock's; the sandbox id follows it.
const aliasPrefix = "airlock:"

var idRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`) })

func validID(id string) error {
	if !idRE().MatchString(id) {
		return errdefs.Invalid("netns: sandbox id %q is not 1-128 letters, digits, '_', '.' or '-'", id)
	}
	return nil
}
