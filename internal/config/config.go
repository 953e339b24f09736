// Package config owns the daemon's configuration: the file format (YAML, or JSON which
// is YAML too), its strict decoding, the embedded defaults and validation. Environment
// knobs are read here and nowhere else. It must not start anything.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/units"
	"gopkg.in/yaml.v3"
)

// Token lets a TCP client in as an owner.
type Token struct {
	Token string `yaml:"token"`
	Owner string `yaml:"owner"`
}

// Limits are per-sandbox limits; sizes are strings such as "512MiB" or "2G".
type Limits struct {
	CPU       float64 `yaml:"cpu"`
	Memory    string  `yaml:"memory"`
	PIDs      int64   `yaml:"pids"`
	OpenFiles int64   `yaml:"open_files"`
	Disk      string  `yaml:"disk"`
}

// Network configures sandbox networking and egress.
type Network struct {
	// Enabled gives every sandbox a network namespace wired to the egress proxy and
	// DNS; when false sandboxes have loopback only.
	Enabled bool `yaml:"enabled"`
	// Subnet is carved into one link per sandbox.
	Subnet string `yaml:"subnet"`
	// UpstreamDNS is "ip:port" of the resolver allowed queries go to (default: the
	// host's first nameserver).
	UpstreamDNS string `yaml:"upstream_dns"`
	// ExtraCAs are PEM files of further CAs upstream servers may be signed by.
	ExtraCAs []string `yaml:"extra_cas"`
	// Table and HostPrefix name this node's nftables table and host-side veths; two
	// daemons on one host (tests) need different ones.
	Table      string `yaml:"table"`
	HostPrefix string `yaml:"host_prefix"`
	// MaxConnections caps the connections one sandbox holds open to the egress proxy and
	// DNS at once (0: 4096); a connection over it is reset and audited.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerOwner caps them across one owner's sandboxes (0: half of what the
	// node keeps descriptors for, which is derived from the daemon's open-files limit).
	MaxConnectionsPerOwner int `yaml:"max_connections_per_owner"`
	// NewConnectionsPerSecond paces the new connections and DNS flows one sandbox opens
	// (0: 200 a second, bursts of twice that), NodeNewConnectionsPerSecond those of all
	// sandboxes together (0: 2000), so that no sandbox fills the host's conntrack table.
	NewConnectionsPerSecond     int `yaml:"new_connections_per_second"`
	NodeNewConnectionsPerSecond int `yaml:"node_new_connections_per_second"`
}

// Images bounds what importing images may cost the host; sizes are strings such as
// "2GiB". Every archive and every name in it is an owner's choice, so each limit is
// checked while the import runs and a refused import leaves nothing behind.
type Images struct {
	// MaxUpload is the most bytes one uploaded archive may have (default 2GiB); a larger
	// upload is refused with 413 before or as soon as it passes the limit.
	MaxUpload string `yaml:"max_upload"`
	// MaxUnpacked is the most bytes one import may unpack (default 8GiB): its layers'
	// contents, every file at its full size (sparse holes included), plus, counted on
	// its own, a compressed archive's decompressed copy.
	MaxUnpacked string `yaml:"max_unpacked"`
	// MaxRatio is the most decompressed bytes per compressed byte one compressed stream
	// of an import may give (default 100, checked once it has given 4 MiB): it stops
	// decompression bombs early.
	MaxRatio int64 `yaml:"max_ratio"`
	// OwnerQuota is the most bytes of images one owner may keep, each image counted at
	// its unpacked size (default 20GiB). The node's administrators (the unix socket)
	// are not held to it.
	OwnerQuota string `yaml:"owner_quota"`
	// InsecureRegistries are registries ("host" or "host:port") pulled from over plain
	// http and allowed on loopback or private addresses, such as a registry on the node's
	// own network. Every other registry is reached over https on public addresses only:
	// a reference is an owner's choice, and the daemon never dials where it says
	// without this list's leave.
	InsecureRegistries []string `yaml:"insecure_registries"`
	// Mirrors maps a registry ("docker.io", "ghcr.io", "host:port") to mirrors tried
	// first, in order, for its images; the registry itself is tried last, when a mirror
	// does not have the image or does not answer.
	Mirrors map[string][]string `yaml:"mirrors"`
	// CacheMax caps the unpacked bytes of every image the node keeps (default "": no
	// cap). Past it, pulled images no sandbox runs on are evicted, least recently used
	// first; imported images and those in use never are.
	CacheMax string `yaml:"cache_max"`
	// Setuid is what becomes of setuid and setgid files in imported and pulled layers:
	// keep (default; they act only inside a sandbox's user namespace), strip or refuse.
	Setuid string `yaml:"setuid"`
	// Devices is what becomes of device nodes in layers: skip (default; devices come
	// from the runtime, never from an image) or refuse.
	Devices string `yaml:"devices"`
	// KeepPulledBlobs keeps each pulled layer's blob as the registry sent it, beside the
	// unpacked layer, so airlock image export writes pulled images with their digests
	// (default false: pulls are faster and the cache half the size; imported images
	// always keep theirs).
	KeepPulledBlobs bool `yaml:"keep_pulled_blobs"`
}

// Objects is the S3-compatible object store the nodes of a cluster share: with it, every
// snapshot is kept there too (content-addressed chunks, then its manifest), so any node
// restores or forks it. Without an endpoint snapshots stay in the state directory.
type Objects struct {
	// Endpoint is https://HOST[:PORT]; http:// only on a trusted network (the daemon
	// warns: contents travel in the clear).
	Endpoint string `yaml:"endpoint"`
	// Bucket is made at start when it does not exist.
	Bucket string `yaml:"bucket"`
	Region string `yaml:"region"`
	// AccessKeyEnv and SecretKeyEnv name the environment variables that hold the keys;
	// or CredentialsFile is an AWS shared credentials file (its default profile).
	// Credentials are never in this file, and never logged.
	AccessKeyEnv    string `yaml:"access_key_env"`
	SecretKeyEnv    string `yaml:"secret_key_env"`
	CredentialsFile string `yaml:"credentials_file"`
	// CAFile is a PEM bundle trusted for the endpoint instead of the system's.
	CAFile string `yaml:"ca_file"`
	// Prefix, ending in "/", is put before every key ("airlock/").
	Prefix string `yaml:"prefix"`
}

// Files bounds what the file calls of every plane (the native API's and the E2B
// plane's) may cost the host.
type Files struct {
	// MaxUpload is the most bytes one file uploaded to a sandbox may have (default
	// 1GiB), after decompression; a larger one is refused with 413 and nothing is
	// written.
	MaxUpload string `yaml:"max_upload"`
	// MaxTreeEntries and MaxTreeBytes bound one directory tree uploaded as a tar
	// stream (PUT /v1/sandboxes/{ref}/files/tar): its entries (default 500000) and its
	// stream's bytes (default 8GiB). Past either the upload is refused, naming it.
	MaxTreeEntries int64  `yaml:"max_tree_entries"`
	MaxTreeBytes   string `yaml:"max_tree_bytes"`
}

// Audit bounds the audit records a sandbox's DNS queries and connections produce, and
// how long events are kept. A sandbox picks the rate of its records, so each sandbox
// has its own rate and queue; records over them are counted, never silently lost.
type Audit struct {
	// Rate and Burst: records one sandbox may add per second, and at once after a quiet
	// spell (defaults 100 and 1000).
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// Queue bounds one sandbox's records waiting to be stored (default 2048).
	Queue int `yaml:"queue"`
	// Coalesce is how long repeats of one refused connection or DNS query are counted
	// into one summary record (default 10s).
	Coalesce string `yaml:"coalesce"`
	// EventsPerSandbox is how many of its newest events each sandbox keeps (default
	// 100000); EventMaxAge is how long any event is kept (default 720h).
	EventsPerSandbox int    `yaml:"events_per_sandbox"`
	EventMaxAge      string `yaml:"event_max_age"`
	// LogMaxAge is how long the hash-chained log of requests, execs and egress
	// decisions keeps a record (default 0: no age limit); LogMaxRecords bounds how many
	// it keeps at all (default 10000000), since sandboxes and unauthenticated callers add
	// records. Pruning drops the oldest and keeps what is left verifiable.
	LogMaxAge     string `yaml:"log_max_age"`
	LogMaxRecords int64  `yaml:"log_max_records"`
}

// Config is the daemon's configuration file.
type Config struct {
	StateDir string `yaml:"state_dir"`
	Socket   string `yaml:"socket"`
	Listen   string `yaml:"listen"`
	// TLSCert and TLSKey, set together, are a PEM certificate (chain) and its key: listen
	// and e2b_listen then serve HTTPS (TLS 1.2 and later), and the files are read again
	// when they change. Without them both serve plain HTTP.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// E2BListen, if set, is the HOST:PORT of the E2B-compatible API (plain HTTP, or HTTPS with tls_cert): the
	// control plane, whose requests need an API key in X-API-Key, and the in-sandbox
	// plane, whose requests carry a sandbox's access token. See docs/e2b.md.
	E2BListen string `yaml:"e2b_listen"`
	// E2BDomain, if set, is the domain under which PORT-SANDBOXID.DOMAIN host names on
	// the E2B listener reach a sandbox's port; it is reported as every sandbox's domain.
	E2BDomain string `yaml:"e2b_domain"`
	// SecretsDir is where secrets delivered as files live while their sandboxes run: a
	// tmpfs the daemon mounts, outside the state directory, so no delivered value is
	// ever written to disk, a snapshot or a fork.
	SecretsDir string `yaml:"secrets_dir"`
	// Tokens is the old way to let TCP clients in: each token becomes one of its
	// owner's API tokens (a service account with the developer role). Use
	// `airlock token create` instead.
	Tokens []Token `yaml:"tokens"`
	// UnixUsers maps local uids to identities over the unix socket, before the
	// identities' own uids (default: root is the administrator, "local").
	UnixUsers map[int]string `yaml:"unix_users"`
	// RolesFile is a YAML file of custom roles (name: [permissions]) applied at start; a
	// malformed one stops the start with the line at fault.
	RolesFile string `yaml:"roles_file"`
	Runc      string `yaml:"runc"`
	// Runsc is gVisor's runsc: empty finds a static one on PATH or where
	// scripts/runsc.sh installs it, "off" runs no runsc.
	Runsc string `yaml:"runsc"`
	// DefaultRuntime runs sandboxes whose create names no runtime: runc or runsc.
	DefaultRuntime string `yaml:"default_runtime"`
	CgroupParent   string `yaml:"cgroup_parent"`
	LogLevel       string `yaml:"log_level"`
	LogFormat      string `yaml:"log_format"`
	DefaultLimits  Limits `yaml:"default_limits"`
	MaxLifetime    string `yaml:"max_lifetime"`
	// MinIdleSuspend and MinMaxLifetime lower the API's floors (1m) — for tests only.
	MinIdleSuspend string `yaml:"min_idle_suspend"`
	MinMaxLifetime string `yaml:"min_max_lifetime"`
	// LiveCap is how many live sandboxes one owner may hold.
	LiveCap   int     `yaml:"live_cap"`
	Network   Network `yaml:"network"`
	TmpfsSize string  `yaml:"tmpfs_size"`
	// ExecOutputLimit bounds, per stream, the encoded size of the output a non-streamed
	// exec or send returns; the rest is dropped and counted in the result.
	ExecOutputLimit string `yaml:"exec_output_limit"`
	// VolumeQuota is the most bytes of volumes and volume snapshots one owner may keep.
	VolumeQuota string `yaml:"volume_quota"`
	// ExecOutputBudget bounds the output all non-streamed calls buffer at once.
	ExecOutputBudget string `yaml:"exec_output_budget"`
	Images           Images `yaml:"images"`
	Files            Files  `yaml:"files"`
	Audit            Audit  `yaml:"audit"`
	// MemoryTarget is the daemon's soft memory limit: past it the Go runtime collects
	// garbage harder instead of growing (default 192MiB; "0" turns it off). GOMEMLIMIT
	// in the environment wins.
	MemoryTarget string `yaml:"memory_target"`
	// Router is the command router's defaults (POST /v1/route, airlock run --profile).
	Router Router `yaml:"router"`
	// Pools are warm pools the daemon sets at each start (pools.go).
	Pools []Pool `yaml:"pools"`
	// Metrics sets the usage collector and /metrics (metrics.go).
	Metrics Metrics `yaml:"metrics"`
	// Console is the web console at / of the node's listeners.
	Console Console `yaml:"console"`
	// Store says where the node keeps its records.
	Store Store `yaml:"store"`
	// Objects is the object store nodes share (default: none).
	Objects Objects `yaml:"objects"`
	// Node and Cluster are the node's membership of a cluster (node.go).
	Node    Node    `yaml:"node"`
	Cluster Cluster `yaml:"cluster"`
}

// Store says where the node keeps its records: in SQLite in state_dir (the embedded
// default, one node), or in a PostgreSQL database that several nodes share.
type Store struct {
	// DSN, if set, is the PostgreSQL database's URL,
	// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS] (PARAMS as libpq reads
	// them: sslmode, pool_max_conns, ...). Without a password in it, PGPASSWORD or
	// ~/.pgpass supply one, as with libpq.
	DSN DSN `yaml:"dsn"`
}

// DSN is a database URL that may hold a password: it prints, and marshals, with the
// password replaced by "xxxxx".
type DSN string

// Redacted returns the URL with its password replaced by "xxxxx" (validated DSNs carry
// one only in the user part).
func (d DSN) Redacted() string {
	u, err := url.Parse(string(d))
	if err != nil {
		return "(an unreadable URL)"
	}
	return u.Redacted()
}

func (d DSN) String() string               { return d.Redacted() }
func (d DSN) GoString() string             { return strconv.Quote(d.Redacted()) }
func (d DSN) MarshalJSON() ([]byte, error) { return json.Marshal(d.Redacted()) }
func (d DSN) MarshalText() ([]byte, error) { return []byte(d.Redacted()), nil }

// checkDSN says what is wrong with a store.dsn, without repeating it (it may hold a
// password).
func checkDSN(d DSN) error {
	u, err := url.Parse(string(d))
	switch {
	case err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql"):
		return errors.New("store.dsn must be a PostgreSQL URL such as postgres://airlock@db.example.com:5432/airlock (or empty: SQLite in state_dir)")
	case u.Host == "":
		return errors.New("store.dsn must name the database's host, as in postgres://airlock@db.example.com:5432/airlock")
	case u.Query().Has("password"):
		return errors.New("store.dsn must carry its password in the user part (postgres://USER:PASSWORD@HOST/DB), not as a password parameter, or leave it to PGPASSWORD or ~/.pgpass")
	}
	return nil
}

// RouterProfiles and DefaultRouterThreshold are the router's profiles and default
// threshold, named here because this package imports no other (the manager's tests
// check they match the router's).
var RouterProfiles = []string{"off", "safe", "strict"}

const DefaultRouterThreshold = 0.5

// Router configures the command router.
type Router struct {
	// Profile is the profile a route request that names none is decided under: off,
	// safe or strict; empty (the default) means none, and such a request runs as
	// asked, in a sandbox.
	Profile string `yaml:"profile"`
	// Threshold is the risk score at or above which the safe profile runs a command in
	// a sandbox (default 0.5).
	Threshold float64 `yaml:"threshold"`
	// FailClosed refuses work the profile would contain while no runtime can run
	// sandboxes; without it such work runs on the host inside the fence, with a
	// sandbox.degraded record in the audit log.
	FailClosed bool `yaml:"fail_closed"`
}

// LimitBounds are the range a default limit may take.
type LimitBounds struct {
	MinCPU, MaxCPU             float64
	MinMemory, MaxMemory       int64
	MinPIDs, MaxPIDs           int64
	MinOpenFiles, MaxOpenFiles int64
	MinDisk, MaxDisk           int64
}

// DefaultLimitBounds are the manager's bounds of a create's limits, named here because
// this package imports no other (the daemon's tests check they match the manager's).
var DefaultLimitBounds = LimitBounds{
	MinCPU: 0.01, MaxCPU: 64,
	MinMemory: 16 << 20, MaxMemory: 256 << 30,
	MinPIDs: 8, MaxPIDs: 1 << 20,
	MinOpenFiles: 64, MaxOpenFiles: 1 << 20,
	MinDisk: 64 << 20, MaxDisk: 1 << 40,
}

// within reports whether path is dir or inside it (both cleaned, lexically).
func within(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Default is the embedded default configuration.
func Default() Config {
	return Config{
		StateDir:       "/var/lib/airlock",
		SecretsDir:     "/run/airlock/secrets",
		Socket:         api.DefaultSocket,
		CgroupParent:   "airlock",
		LogLevel:       "info",
		LogFormat:      "text",
		DefaultLimits:  Limits{CPU: 1, Memory: "1GiB", PIDs: 1024, OpenFiles: 65536, Disk: "10GiB"},
		MaxLifetime:    "8h",
		MinIdleSuspend: "1m",
		MinMaxLifetime: "1m",
		LiveCap:        100,
		VolumeQuota:    "1TiB",
		Network:        Network{Enabled: true, Subnet: "10.203.0.0/16", Table: "airlock", HostPrefix: "al"},
		Console:        Console{Enabled: true},
		TmpfsSize:      "1GiB",

		ExecOutputLimit:  "16MiB",
		ExecOutputBudget: "64MiB",
		MemoryTarget:     "192MiB",
		Images:           Images{MaxUpload: "2GiB", MaxUnpacked: "8GiB", MaxRatio: 100, OwnerQuota: "20GiB"},
		Files:            Files{MaxUpload: "1GiB", MaxTreeEntries: 500_000, MaxTreeBytes: "8GiB"},
		Audit: Audit{Rate: 100, Burst: 1000, Queue: 2048, Coalesce: "10s", EventsPerSandbox: 100000, EventMaxAge: "720h",
			LogMaxRecords: 10_000_000},
		Router: Router{Threshold: DefaultRouterThreshold},
	}
}

// LocalOwner is the owner of the node's local users, who reach the daemon through the
// unix socket and administer it. No token may name it.
const LocalOwner = "local"

// Load reads path over the defaults. Unknown keys are errors.
func Load(path string) (Config, error) {
	c := Default()
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	c.ApplyEnv()
	return c, c.Validate()
}

var (
	cgroupRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`) })
	ownerRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) })
	// e2bDomainRE: dot-separated labels of letters, digits and inner hyphens.
	e2bDomainRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	})
)

// Settings are the configuration's sizes and durations in their types, each parsed
// and checked once, by Config.Settings.
type Settings struct {
	DefaultMemory, DefaultDisk, TmpfsSize int64
	ExecOutputLimit, ExecOutputBudget     int64
	MaxLifetime, MinIdleSuspend           time.Duration
	MinMaxLifetime                        time.Duration
	ImageUpload, ImageUnpacked            int64
	ImageQuota, ImageCacheMax             int64
	FileUpload                            int64
	VolumeQuota                           int64
	TreeEntries, TreeBytes                int64
	AuditCoalesce, EventMaxAge            time.Duration
	AuditLogMaxAge                        time.Duration
	MemoryTarget                          int64 // 0: off
	Pools                                 []PoolSetting
	Node                                  NodeSetting
	Metrics                               MetricsSetting
}

// Validate checks every field and says what is allowed.
func (c Config) Validate() error {
	_, err := c.Settings()
	return err
}

// Settings checks every field, says what is allowed of each one that is wrong, and
// returns the typed values.
func (c Config) Settings() (Settings, error) {
	var s Settings
	var errs []error
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state_dir %q must be an absolute path", c.StateDir))
	}
	if c.SecretsDir == "" || !filepath.IsAbs(c.SecretsDir) {
		errs = append(errs, fmt.Errorf("secrets_dir %q must be an absolute path", c.SecretsDir))
	} else if within(c.SecretsDir, c.StateDir) || within(c.StateDir, c.SecretsDir) {
		// The tmpfs mounted on secrets_dir would hide a state directory under it.
		errs = append(errs, fmt.Errorf("secrets_dir %q and state_dir %q must be outside each other: delivered secrets never go where state is kept", c.SecretsDir, c.StateDir))
	}
	if c.Socket == "" || !filepath.IsAbs(c.Socket) || len(c.Socket) > 100 {
		errs = append(errs, fmt.Errorf("socket %q must be an absolute path of at most 100 bytes", c.Socket))
	} else if within(c.Socket, c.SecretsDir) || within(c.StateDir, c.Socket) {
		errs = append(errs, fmt.Errorf("socket %q must be outside secrets_dir %q, and not where state_dir %q is", c.Socket, c.SecretsDir, c.StateDir))
	}
	// Paths of files the daemon reads or runs as root: relative ones would depend on
	// the directory it happens to start in.
	for _, f := range []struct{ name, v string }{{"roles_file", c.RolesFile}, {"runc", c.Runc}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", f.name, f.v))
		}
	}
	if c.Runsc != "" && c.Runsc != "off" && !filepath.IsAbs(c.Runsc) {
		errs = append(errs, fmt.Errorf("runsc %q must be an absolute path, off, or empty to find one", c.Runsc))
	}
	for i, f := range c.Network.ExtraCAs {
		if !filepath.IsAbs(f) {
			errs = append(errs, fmt.Errorf("network.extra_cas[%d] %q must be an absolute path", i, f))
		}
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen %q must be HOST:PORT", c.Listen))
		}
	}
	if c.E2BDomain != "" && (len(c.E2BDomain) > 253 || !e2bDomainRE().MatchString(c.E2BDomain)) {
		errs = append(errs, fmt.Errorf("e2b_domain %q must be a DNS name such as sandboxes.example.com (letters, digits, hyphens, dots)", c.E2BDomain))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("tls_cert and tls_key go together: set both (a PEM certificate and its key) or neither"))
	}
	for _, f := range []struct{ name, v string }{{"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", f.name, f.v))
		}
	}
	if c.E2BListen != "" {
		if _, port, err := net.SplitHostPort(c.E2BListen); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("e2b_listen %q must be HOST:PORT", c.E2BListen))
		} else if c.E2BListen == c.Listen {
			errs = append(errs, fmt.Errorf("e2b_listen %q must differ from listen", c.E2BListen))
		}
	}
	for i, t := range c.Tokens {
		if len(t.Token) < 16 {
			errs = append(errs, fmt.Errorf("tokens[%d]: a token must be at least 16 characters", i))
		}
		if !ownerRE().MatchString(t.Owner) {
			errs = append(errs, fmt.Errorf("tokens[%d]: owner %q must be 1 to 63 lowercase letters, digits, '.', '_' or '-'", i, t.Owner))
		}
		if t.Owner == LocalOwner {
			errs = append(errs, fmt.Errorf("tokens[%d]: owner %q is reserved for the node's administrators on the unix socket; choose another name", i, t.Owner))
		}
	}
	for uid, name := range c.UnixUsers {
		if uid < 0 || !ownerRE().MatchString(name) {
			errs = append(errs, fmt.Errorf("unix_users: %d: %q must map a uid to an identity name of 1 to 63 lowercase letters, digits, '.', '_' or '-'", uid, name))
		}
	}
	if !cgroupRE().MatchString(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("cgroup_parent %q must be one path element of letters, digits, '.', '_' or '-'", c.CgroupParent))
	}
	switch c.DefaultRuntime {
	case "", "runc":
	case "runsc":
		if c.Runsc == "off" {
			errs = append(errs, errors.New(`default_runtime "runsc" needs runsc, which runsc: off turns off`))
		}
	default:
		errs = append(errs, fmt.Errorf("default_runtime %q must be runc or runsc", c.DefaultRuntime))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level %q must be debug, info, warn or error", c.LogLevel))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q must be text or json", c.LogFormat))
	}
	// Default limits are what a create that names none gets, unchecked by the API's
	// bounds: each must be within them (DefaultLimitBounds), since zero means no limit
	// at all to the runtime and NaN passes every comparison.
	b := DefaultLimitBounds
	if l := c.DefaultLimits; !(l.CPU >= b.MinCPU && l.CPU <= b.MaxCPU) {
		errs = append(errs, fmt.Errorf("default_limits.cpu %v must be from %v to %v cores", l.CPU, b.MinCPU, b.MaxCPU))
	}
	if l := c.DefaultLimits; l.PIDs < b.MinPIDs || l.PIDs > b.MaxPIDs {
		errs = append(errs, fmt.Errorf("default_limits.pids %d must be from %d to %d", l.PIDs, b.MinPIDs, b.MaxPIDs))
	}
	if l := c.DefaultLimits; l.OpenFiles < b.MinOpenFiles || l.OpenFiles > b.MaxOpenFiles {
		errs = append(errs, fmt.Errorf("default_limits.open_files %d must be from %d to %d", l.OpenFiles, b.MinOpenFiles, b.MaxOpenFiles))
	}
	var err error
	if s.DefaultMemory, err = units.ParseSize(c.DefaultLimits.Memory); err != nil {
		errs = append(errs, fmt.Errorf("default_limits.memory: %w", err))
	} else if s.DefaultMemory < b.MinMemory || s.DefaultMemory > b.MaxMemory {
		errs = append(errs, fmt.Errorf("default_limits.memory %q must be from %s to %s", c.DefaultLimits.Memory, units.FormatSize(b.MinMemory), units.FormatSize(b.MaxMemory)))
	}
	if s.DefaultDisk, err = units.ParseSize(c.DefaultLimits.Disk); err != nil {
		errs = append(errs, fmt.Errorf("default_limits.disk: %w", err))
	} else if s.DefaultDisk < b.MinDisk || s.DefaultDisk > b.MaxDisk {
		errs = append(errs, fmt.Errorf("default_limits.disk %q must be from %s to %s", c.DefaultLimits.Disk, units.FormatSize(b.MinDisk), units.FormatSize(b.MaxDisk)))
	}
	if s.TmpfsSize, err = units.ParseSize(c.TmpfsSize); err != nil {
		errs = append(errs, fmt.Errorf("tmpfs_size: %w", err))
	} else if s.TmpfsSize < 1<<20 {
		errs = append(errs, fmt.Errorf("tmpfs_size %q must be a size of at least 1MiB, such as 1GiB", c.TmpfsSize))
	}
	limit, lerr := units.ParseSize(c.ExecOutputLimit)
	budget, berr := units.ParseSize(c.ExecOutputBudget)
	s.ExecOutputLimit, s.ExecOutputBudget = limit, budget
	switch {
	case lerr != nil || limit < 64<<10 || limit > 1<<30:
		errs = append(errs, fmt.Errorf("exec_output_limit %q must be a size from 64KiB to 1GiB, such as 16MiB", c.ExecOutputLimit))
	case berr != nil || budget < 2*limit:
		errs = append(errs, fmt.Errorf("exec_output_budget %q must be a size of at least twice exec_output_limit, such as 64MiB", c.ExecOutputBudget))
	}
	if s.MaxLifetime, err = time.ParseDuration(c.MaxLifetime); err != nil || s.MaxLifetime < time.Minute {
		errs = append(errs, fmt.Errorf("max_lifetime %q must be a duration of at least 1m, such as 8h", c.MaxLifetime))
	}
	for _, f := range []struct {
		name, v string
		d       *time.Duration
	}{{"min_idle_suspend", c.MinIdleSuspend, &s.MinIdleSuspend}, {"min_max_lifetime", c.MinMaxLifetime, &s.MinMaxLifetime}} {
		if *f.d, err = time.ParseDuration(f.v); err != nil || *f.d <= 0 {
			errs = append(errs, fmt.Errorf("%s %q must be a positive duration such as 1m", f.name, f.v))
		}
	}
	if _, err := netip.ParsePrefix(c.Network.Subnet); err != nil {
		errs = append(errs, fmt.Errorf("network.subnet %q must be an IPv4 CIDR prefix such as 10.203.0.0/16", c.Network.Subnet))
	}
	if !cgroupRE().MatchString(c.Network.Table) || len(c.Network.HostPrefix) < 1 || len(c.Network.HostPrefix) > 7 {
		errs = append(errs, fmt.Errorf("network.table must be letters, digits, '_' or '-' and network.host_prefix 1 to 7 lowercase letters or digits"))
	}
	if c.Network.MaxConnections < 0 || c.Network.MaxConnections > 1<<20 {
		errs = append(errs, fmt.Errorf("network.max_connections %d must be from 1 to 1048576 (0: 4096)", c.Network.MaxConnections))
	}
	for _, r := range []struct {
		key  string
		rate int
		def  string
	}{{"new_connections_per_second", c.Network.NewConnectionsPerSecond, "200"}, {"node_new_connections_per_second", c.Network.NodeNewConnectionsPerSecond, "2000"}} {
		if r.rate < 0 || r.rate > 1_000_000 {
			errs = append(errs, fmt.Errorf("network.%s %d must be from 1 to 1000000 (0: %s)", r.key, r.rate, r.def))
		}
	}
	if c.Network.MaxConnectionsPerOwner < 0 || c.Network.MaxConnectionsPerOwner > 1<<20 {
		errs = append(errs, fmt.Errorf("network.max_connections_per_owner %d must be from 1 to 1048576 (0: from the open-files limit)", c.Network.MaxConnectionsPerOwner))
	}
	if c.Network.UpstreamDNS != "" {
		if _, err := netip.ParseAddrPort(c.Network.UpstreamDNS); err != nil {
			errs = append(errs, fmt.Errorf("network.upstream_dns %q must be IP:PORT", c.Network.UpstreamDNS))
		}
	}
	for _, f := range []struct {
		name, v string
		n       *int64
	}{{"images.max_upload", c.Images.MaxUpload, &s.ImageUpload},
		{"images.max_unpacked", c.Images.MaxUnpacked, &s.ImageUnpacked}, {"images.owner_quota", c.Images.OwnerQuota, &s.ImageQuota},
		{"files.max_upload", c.Files.MaxUpload, &s.FileUpload}, {"files.max_tree_bytes", c.Files.MaxTreeBytes, &s.TreeBytes},
		{"volume_quota", c.VolumeQuota, &s.VolumeQuota}} {
		if *f.n, err = units.ParseSize(f.v); err != nil || *f.n < 1<<20 {
			errs = append(errs, fmt.Errorf("%s %q must be a size of at least 1MiB, such as 2GiB", f.name, f.v))
		}
	}
	if s.TreeEntries = c.Files.MaxTreeEntries; s.TreeEntries < 1 || s.TreeEntries > 100_000_000 {
		errs = append(errs, fmt.Errorf("files.max_tree_entries %d must be from 1 to 100000000", c.Files.MaxTreeEntries))
	}
	switch c.Images.Setuid {
	case "", "keep", "strip", "refuse":
	default:
		errs = append(errs, fmt.Errorf("images.setuid %q must be keep, strip or refuse", c.Images.Setuid))
	}
	switch c.Images.Devices {
	case "", "skip", "refuse":
	default:
		errs = append(errs, fmt.Errorf("images.devices %q must be skip or refuse", c.Images.Devices))
	}
	if c.Images.CacheMax != "" {
		if s.ImageCacheMax, err = units.ParseSize(c.Images.CacheMax); err != nil || s.ImageCacheMax < 64<<20 {
			errs = append(errs, fmt.Errorf("images.cache_max %q must be a size of at least 64MiB, such as 50GiB (or empty: no cap)", c.Images.CacheMax))
		}
	}
	if c.Images.MaxRatio < 2 || c.Images.MaxRatio > 100000 {
		errs = append(errs, fmt.Errorf("images.max_ratio %d must be from 2 to 100000 (decompressed bytes per compressed byte)", c.Images.MaxRatio))
	}
	if a := c.Audit; !(a.Rate >= 1 && a.Rate <= 1e6) || a.Burst < 1 || a.Burst > 1<<20 || a.Queue < 16 || a.Queue > 1<<20 {
		errs = append(errs, fmt.Errorf("audit.rate (%g) must be from 1 to 1000000, audit.burst (%d) from 1 to 1048576 and audit.queue (%d) from 16 to 1048576", a.Rate, a.Burst, a.Queue))
	}
	if s.AuditCoalesce, err = time.ParseDuration(c.Audit.Coalesce); err != nil || s.AuditCoalesce < time.Second || s.AuditCoalesce > time.Hour {
		errs = append(errs, fmt.Errorf("audit.coalesce %q must be a duration from 1s to 1h, such as 10s", c.Audit.Coalesce))
	}
	if c.Audit.EventsPerSandbox < 1000 {
		errs = append(errs, fmt.Errorf("audit.events_per_sandbox %d must be at least 1000", c.Audit.EventsPerSandbox))
	}
	if c.Audit.LogMaxRecords < 1000 {
		errs = append(errs, fmt.Errorf("audit.log_max_records %d must be at least 1000", c.Audit.LogMaxRecords))
	}
	if c.Audit.LogMaxAge != "" {
		if s.AuditLogMaxAge, err = time.ParseDuration(c.Audit.LogMaxAge); err != nil || s.AuditLogMaxAge < time.Hour {
			errs = append(errs, fmt.Errorf("audit.log_max_age %q must be a duration of at least 1h, such as 2160h (empty: keep every record)", c.Audit.LogMaxAge))
		}
	}
	if s.EventMaxAge, err = time.ParseDuration(c.Audit.EventMaxAge); err != nil || s.EventMaxAge < time.Hour {
		errs = append(errs, fmt.Errorf("audit.event_max_age %q must be a duration of at least 1h, such as 720h", c.Audit.EventMaxAge))
	}
	if s.MemoryTarget, err = units.ParseSize(c.MemoryTarget); err != nil || (s.MemoryTarget != 0 && s.MemoryTarget < 64<<20) {
		errs = append(errs, fmt.Errorf("memory_target %q must be 0 (off) or a size of at least 64MiB, such as 192MiB", c.MemoryTarget))
	}
	if c.LiveCap < 1 {
		errs = append(errs, fmt.Errorf("live_cap %d must be at least 1", c.LiveCap))
	}
	if c.Router.Profile != "" && !slices.Contains(RouterProfiles, c.Router.Profile) {
		errs = append(errs, fmt.Errorf("router.profile %q must be %s, or empty for none", c.Router.Profile, strings.Join(RouterProfiles, ", ")))
	}
	if t := c.Router.Threshold; math.IsNaN(t) || t <= 0 || t > 1 {
		errs = append(errs, fmt.Errorf("router.threshold %v must be a risk score above 0 and at most 1, such as 0.5", t))
	}
	pools, perrs := c.poolSettings()
	s.Pools, errs = pools, append(errs, perrs...)
	if c.Store.DSN != "" {
		if err := checkDSN(c.Store.DSN); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.Objects.check()...)
	node, nerrs := c.nodeSetting()
	s.Node, errs = node, append(errs, nerrs...)
	metrics, merrs := c.metricsSetting()
	s.Metrics, errs = metrics, append(errs, merrs...)
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	return s, nil
}

var (
	bucketRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`) })
	envNameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	keyPrefixRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([A-Za-z0-9_-][A-Za-z0-9._-]*/)*$`) })
)

// check says what is wrong with the objects section.
func (o Objects) check() []error {
	if o == (Objects{}) {
		return nil
	}
	var errs []error
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.User != nil || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("objects.endpoint %q must be https://HOST[:PORT] (or http:// on a trusted network)", o.Endpoint))
	} else if u.Scheme == "http" && o.CAFile != "" {
		errs = append(errs, fmt.Errorf("objects.ca_file is for an https:// endpoint, not %q", o.Endpoint))
	}
	if !bucketRE().MatchString(o.Bucket) {
		errs = append(errs, fmt.Errorf("objects.bucket %q must be 3 to 63 lowercase letters, digits, '.' or '-'", o.Bucket))
	}
	if o.Prefix != "" && (len(o.Prefix) > 256 || !keyPrefixRE().MatchString(o.Prefix)) {
		errs = append(errs, fmt.Errorf("objects.prefix %q must be path segments of letters, digits, '.', '_' or '-', each ending in '/', such as airlock/", o.Prefix))
	}
	envs := o.AccessKeyEnv != "" || o.SecretKeyEnv != ""
	switch {
	case envs && o.CredentialsFile != "":
		errs = append(errs, errors.New("objects: set access_key_env and secret_key_env, or credentials_file, not both"))
	case envs && (!envNameRE().MatchString(o.AccessKeyEnv) || !envNameRE().MatchString(o.SecretKeyEnv)):
		errs = append(errs, fmt.Errorf("objects.access_key_env %q and secret_key_env %q must both name environment variables", o.AccessKeyEnv, o.SecretKeyEnv))
	case !envs && o.CredentialsFile == "":
		errs = append(errs, errors.New("objects needs credentials: access_key_env and secret_key_env, or credentials_file"))
	}
	for _, f := range []struct{ name, v string }{{"objects.credentials_file", o.CredentialsFile}, {"objects.ca_file", o.CAFile}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", f.name, f.v))
		}
	}
	return errs
}
