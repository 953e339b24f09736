package config

import (
	"fmt"
	"math"
	"regexp"

	"github.com/airlockhq/airlock/internal/units"
)

// Pool is one warm pool of the configuration (pools:): the node keeps Size sandboxes
// of Image (already on the node), Runtime, Limits (zero: the defaults) and Network mode
// ready for creates that ask for exactly these. The daemon sets each at start; pools
// set with `airlock pool set` are kept in its store besides.
type Pool struct {
	Name    string `yaml:"name"`
	Image   string `yaml:"image"`
	Size    int    `yaml:"size"`
	Runtime string `yaml:"runtime"`
	Network string `yaml:"network"`
	Limits  Limits `yaml:"limits"`
}

// PoolSetting is a configured pool with its sizes parsed.
type PoolSetting struct {
	Pool
	Memory, Disk int64
}

// MaxPoolSize is the most members one pool keeps (the manager's bound too).
const MaxPoolSize = 256

var poolNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// poolSettings checks pools: and returns the parsed pools and what is wrong.
func (c Config) poolSettings() ([]PoolSetting, []error) {
	var out []PoolSetting
	var errs []error
	seen := map[string]bool{}
	for i, p := range c.Pools {
		at := fmt.Sprintf("pools[%d]", i)
		if !poolNameRE.MatchString(p.Name) {
			errs = append(errs, fmt.Errorf("%s: name %q must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit", at, p.Name))
		} else if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s: name %q is given twice", at, p.Name))
		}
		seen[p.Name] = true
		if p.Size < 0 || p.Size > MaxPoolSize {
			errs = append(errs, fmt.Errorf("%s: size %d must be from 0 to %d", at, p.Size, MaxPoolSize))
		}
		switch p.Network {
		case "", "none", "deny_all", "baseline", "allowlist", "unrestricted":
		default:
			errs = append(errs, fmt.Errorf("%s: network %q must be none, deny_all, baseline, allowlist or unrestricted", at, p.Network))
		}
		if l := p.Limits; math.IsNaN(l.CPU) || l.CPU < 0 || l.PIDs < 0 || l.OpenFiles < 0 {
			errs = append(errs, fmt.Errorf("%s: limits cpu, pids and open_files must not be negative (0: the node's default)", at))
		}
		ps := PoolSetting{Pool: p}
		var err error
		if ps.Memory, err = parseOptionalSize(p.Limits.Memory); err != nil {
			errs = append(errs, fmt.Errorf("%s: limits.memory %q must be a size such as 512MiB (empty: the default)", at, p.Limits.Memory))
		}
		if ps.Disk, err = parseOptionalSize(p.Limits.Disk); err != nil {
			errs = append(errs, fmt.Errorf("%s: limits.disk %q must be a size such as 10GiB (empty: the default)", at, p.Limits.Disk))
		}
		out = append(out, ps)
	}
	return out, errs
}

// parseOptionalSize is units.ParseSize, with "" for 0.
func parseOptionalSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return units.ParseSize(s)
}
