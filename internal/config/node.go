package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/labels"
	"github.com/airlockhq/airlock/internal/units"
)

// Node names this node within a cluster and says where the other nodes reach it. A
// node with none of it is one node alone, named for its host.
type Node struct {
	// Name is the node's name, unique in the cluster (default: the host name's first
	// label, lowercased).
	Name string `yaml:"name"`
	// Listen is the HOST:PORT where the node serves the other nodes ("": it does not).
	Listen string `yaml:"listen"`
	// Advertise is the HOST:PORT the other nodes dial (default: listen, when its host
	// is an address of its own rather than 0.0.0.0 or ::).
	Advertise string `yaml:"advertise"`
	// LeasePeriod is how often the node renews its membership lease (default 5s); a node
	// that has not renewed for two periods is lost.
	LeasePeriod string `yaml:"lease_period"`
	// Labels are the operators' words on the node (zone: a, gpu: "yes"), which a
	// create's node selector matches; a key and value follow the sandbox label rule.
	Labels map[string]string `yaml:"labels"`
	// Memory is how much memory the node's sandboxes may reserve between them, their
	// memory limits summed (default: in a cluster, the host's physical memory; a node
	// alone does not check). More overcommits the limits (most sandboxes use far less
	// than theirs); less keeps memory back.
	Memory string `yaml:"memory"`
}

// Cluster is what the nodes of one cluster share.
type Cluster struct {
	// JoinToken is the secret the nodes prove to each other (default: the environment's
	// AIRLOCK_JOIN_TOKEN). It never prints.
	JoinToken JoinToken `yaml:"join_token"`
	// KeysDir holds the key files every node of the cluster shares (audit.key,
	// secret.key, e2b-token.key), instead of each node's state directory: a directory
	// only root may read. Nodes on one store must share them to read each other's
	// secrets and verify one audit chain.
	KeysDir string `yaml:"keys_dir"`
}

// JoinToken is a cluster's shared secret: it prints, and marshals, as "xxxxx".
type JoinToken string

func (JoinToken) String() string               { return "xxxxx" }
func (JoinToken) GoString() string             { return `"xxxxx"` }
func (JoinToken) MarshalJSON() ([]byte, error) { return json.Marshal("xxxxx") }
func (JoinToken) MarshalText() ([]byte, error) { return []byte("xxxxx"), nil }

// JoinTokenEnv is the environment variable a join token may come from.
const JoinTokenEnv = "AIRLOCK_JOIN_TOKEN"

// MinJoinToken is the fewest characters a join token may have: 32 random bytes, as
// `openssl rand -hex 32` gives, are what it should hold.
const MinJoinToken = 32

// DefaultLeasePeriod is how often a node renews its lease unless node.lease_period says.
const DefaultLeasePeriod = 5 * time.Second

// ApplyEnv takes what the environment sets and the file does not: the join token.
func (c *Config) ApplyEnv() {
	if c.Cluster.JoinToken == "" {
		c.Cluster.JoinToken = JoinToken(os.Getenv(JoinTokenEnv))
	}
}

// NodeSetting is the node's membership, typed.
type NodeSetting struct {
	Name              string
	Listen, Advertise string // "": the node does not serve other nodes
	LeasePeriod       time.Duration
	Labels            map[string]string
	Memory            int64 // 0: the host's
}

var nodeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })

// nodeNameRule says what a node name may be.
const nodeNameRule = "1 to 63 lowercase letters, digits or inner '-' (a DNS label)"

// CheckNodeName says why name cannot name a node, or nil if it can.
func CheckNodeName(name string) error {
	if !nodeNameRE().MatchString(name) {
		return fmt.Errorf("node name %q must be %s", name, nodeNameRule)
	}
	return nil
}

// hostNodeName is the default node name: the host name's first label, lowercased.
func hostNodeName() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node.name is not set and the host name cannot be read (%v): set node.name", err)
	}
	name, _, _ := strings.Cut(strings.ToLower(h), ".")
	if !nodeNameRE().MatchString(name) {
		return "", fmt.Errorf("node.name is not set and the host name %q is not a node name (%s): set node.name", h, nodeNameRule)
	}
	return name, nil
}

// nodeSetting checks node and cluster and returns the typed membership.
func (c Config) nodeSetting() (NodeSetting, []error) {
	var errs []error
	s := NodeSetting{Name: c.Node.Name, Listen: c.Node.Listen, Advertise: c.Node.Advertise, LeasePeriod: DefaultLeasePeriod}
	if s.Name == "" {
		name, err := hostNodeName()
		if err != nil {
			errs = append(errs, err)
		}
		s.Name = name
	} else if !nodeNameRE().MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("node.name %q must be %s", s.Name, nodeNameRule))
	}
	if err := labels.Check(c.Node.Labels); err != nil {
		errs = append(errs, fmt.Errorf("node.labels: %w", err))
	}
	s.Labels = c.Node.Labels
	if c.Node.Memory != "" {
		m, err := units.ParseSize(c.Node.Memory)
		if err != nil || m < 64<<20 {
			errs = append(errs, fmt.Errorf("node.memory %q must be a size of at least 64MiB, such as 64GiB", c.Node.Memory))
		}
		s.Memory = m
	}
	if c.Node.LeasePeriod != "" {
		d, err := time.ParseDuration(c.Node.LeasePeriod)
		if err != nil || d < time.Second || d > time.Minute {
			errs = append(errs, fmt.Errorf("node.lease_period %q must be a duration from 1s to 1m, such as 5s", c.Node.LeasePeriod))
		}
		s.LeasePeriod = d
	}
	if s.Listen != "" {
		host, port, err := net.SplitHostPort(s.Listen)
		switch {
		case err != nil || port == "":
			errs = append(errs, fmt.Errorf("node.listen %q must be HOST:PORT", s.Listen))
		case s.Listen == c.Listen || s.Listen == c.E2BListen:
			errs = append(errs, fmt.Errorf("node.listen %q must differ from listen and e2b_listen", s.Listen))
		case s.Advertise == "":
			if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
				errs = append(errs, fmt.Errorf("node.advertise must be set when node.listen %q listens on every address: the HOST:PORT the other nodes dial", s.Listen))
			}
			s.Advertise = s.Listen
		}
		if c.Cluster.JoinToken == "" {
			errs = append(errs, fmt.Errorf("node.listen needs cluster.join_token (or %s): the secret every node of the cluster shares, such as `openssl rand -hex 32` prints", JoinTokenEnv))
		}
	} else if s.Advertise != "" {
		errs = append(errs, fmt.Errorf("node.advertise %q needs node.listen: where the node serves the other nodes", s.Advertise))
	}
	if s.Advertise != "" {
		host, port, err := net.SplitHostPort(s.Advertise)
		ip, ierr := netip.ParseAddr(host)
		if err != nil || host == "" || port == "" || port == "0" || (ierr == nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("node.advertise %q must be HOST:PORT that the other nodes can dial (not 0.0.0.0, ::, or port 0)", s.Advertise))
		}
	}
	if d := c.Cluster.KeysDir; d != "" && !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("cluster.keys_dir %q must be an absolute path, such as /etc/airlock/keys", d))
	}
	if t := c.Cluster.JoinToken; t != "" && len(t) < MinJoinToken {
		// Never the token itself: only its length.
		errs = append(errs, fmt.Errorf("cluster.join_token has %d characters, fewer than %d: use 32 random bytes, such as `openssl rand -hex 32` prints", len(t), MinJoinToken))
	}
	return s, errs
}
