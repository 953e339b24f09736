// Package sweep owns removing what an Airlock node left on the host after the node is
// gone: its containers, the processes in its cgroups, the mounts under its state
// directory and its secrets tmpfs, its cgroups, its nftables table and its veths. A node
// writes a Record of those names into its state directory before it makes any of them
// (WriteRecord); `airlock gc --state-dir` and the test harness's sweep read it back.
//
// It must never touch what a live node owns: StateDir refuses a directory whose daemon
// holds its lock, and any name another daemon has locked since. It knows nothing of the
// store, the manager or the runtime driver: it works from the host's own view (runc's
// state root, /proc/self/mountinfo, cgroupfs, netlink), so it works whatever state the
// node died in.
//
// Hostile surface: the record is read from a state directory, which StateDir checks is
// the caller's own and not writable by others; every name in it is validated before
// anything is done with it.
package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/durable"
)

// RecordName is the file in a state directory that holds its Record.
const RecordName = "host.json"

// Record names what a node makes on the host outside its state directory, and the
// container runtimes whose state roots are in it.
type Record struct {
	// CgroupParents are the cgroup paths (relative to every hierarchy's root) its
	// sandboxes' cgroups are made under.
	CgroupParents []string `json:"cgroup_parents"`
	// Runtimes are the OCI runtimes it runs containers with and their state roots.
	Runtimes []Runtime `json:"runtimes,omitempty"`
	// Table is its nftables table (family inet), "" without sandbox networking.
	Table string `json:"nftables_table,omitempty"`
	// VethPrefix begins the names of its host-side veths.
	VethPrefix string `json:"veth_prefix,omitempty"`
	// SecretsDir is where it mounts the tmpfs of delivered secrets.
	SecretsDir string `json:"secrets_dir,omitempty"`
}

// Runtime is an OCI runtime binary ("runc", "runsc" or a path) and its state root.
type Runtime struct {
	Binary string `json:"binary"`
	Root   string `json:"root"`
}

var (
	cgroupName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`) })
	tableName  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`) })
	vethPrefix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]{1,7}$`) })
)

// Validate says what in r is not a name a node could have used.
func (r Record) Validate() error {
	var errs []error
	for _, p := range r.CgroupParents {
		if !cgroupName().MatchString(p) || strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/./") {
			errs = append(errs, fmt.Errorf("cgroup parent %q is not a relative path of letters, digits, '_', '.' and '-'", p))
		}
	}
	for _, rt := range r.Runtimes {
		if rt.Binary == "" || strings.ContainsAny(rt.Binary, "\x00\n") {
			errs = append(errs, fmt.Errorf("runtime binary %q is empty or not a file name", rt.Binary))
		}
		if !filepath.IsAbs(rt.Root) || filepath.Clean(rt.Root) != rt.Root {
			errs = append(errs, fmt.Errorf("runtime root %q is not a clean absolute path", rt.Root))
		}
	}
	if r.Table != "" && !tableName().MatchString(r.Table) {
		errs = append(errs, fmt.Errorf("nftables table %q is not 1-64 letters, digits and '_'", r.Table))
	}
	if r.VethPrefix != "" && !vethPrefix().MatchString(r.VethPrefix) {
		errs = append(errs, fmt.Errorf("veth prefix %q is not 1-7 lower-case letters and digits", r.VethPrefix))
	}
	if r.SecretsDir != "" && (!filepath.IsAbs(r.SecretsDir) || filepath.Clean(r.SecretsDir) != r.SecretsDir || r.SecretsDir == "/") {
		errs = append(errs, fmt.Errorf("secrets directory %q is not a clean absolute path below /", r.SecretsDir))
	}
	return errors.Join(errs...)
}

// WriteRecord writes r into the state directory dir, replacing the one there.
func WriteRecord(dir string, r Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return durable.EnsureFile(filepath.Join(dir, RecordName), append(b, '\n'), 0o600)
}

// ReadRecord reads the Record of the state directory dir.
func ReadRecord(dir string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(dir, RecordName))
	if err != nil {
		return r, err
	}
	if len(b) > 64<<10 {
		return r, fmt.Errorf("%s: larger than 64 KiB", filepath.Join(dir, RecordName))
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, RecordName), err)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, RecordName), err)
	}
	return r, nil
}
