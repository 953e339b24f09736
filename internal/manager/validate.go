package manager

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/labels"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/units"
)

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })

// NameRule says what a sandbox name may be.
const NameRule = "1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"

// ValidateName checks a sandbox name.
func ValidateName(name string) error {
	if !nameRE().MatchString(name) {
		return errdefs.Invalid("invalid sandbox name %q: a name is %s", name, NameRule)
	}
	if strings.HasPrefix(name, "sb_") {
		return errdefs.Invalid("invalid sandbox name %q: the prefix sb_ is reserved for ids", name)
	}
	return nil
}

var envKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// EnvNameRule says what an environment variable's name may be.
const EnvNameRule = "letters, digits and '_', not starting with a digit"

// Bounds of the environment a caller gives a sandbox or one of its processes.
const (
	maxEnvVars = 256
	maxEnvVar  = 32 << 10
)

// CheckEnv is the one rule for the environment a caller gives a process or a sandbox,
// whichever plane it comes through: "K=V" entries, each name EnvNameRule, each value
// without NUL bytes, each entry at most 32 KiB, at most 256 of them.
func CheckEnv(env []string) error {
	if len(env) > maxEnvVars {
		return errdefs.Invalid("too many environment variables (%d); at most %d", len(env), maxEnvVars)
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return errdefs.Invalid("environment entry %.64q is not NAME=value", kv)
		}
		if !envKeyRE().MatchString(k) {
			return errdefs.Invalid("invalid environment variable name %.64q: use %s", k, EnvNameRule)
		}
		if strings.ContainsRune(v, 0) {
			return errdefs.Invalid("environment variable %s contains a NUL byte; a value is text without NUL bytes", k)
		}
		if len(kv) > maxEnvVar {
			return errdefs.Invalid("environment variable %s is longer than 32 KiB, the most one may be", k)
		}
	}
	return nil
}

// checkProcess checks what a caller gives a new process, whichever plane it comes
// through: its environment (CheckEnv) and its working directory, absolute when given
// ("": the sandbox's own).
func checkProcess(env []string, cwd string) error {
	if cwd != "" && (cwd[0] != '/' || strings.ContainsRune(cwd, 0)) {
		return errdefs.Invalid("invalid working directory %.256q: give an absolute path inside the sandbox, such as /home/user", cwd)
	}
	return CheckEnv(env)
}

func validateLabels(l map[string]string) error {
	if err := labels.Check(l); err != nil {
		return errdefs.Invalid("%v", err)
	}
	return nil
}

// resolveLimits fills defaults and checks bounds: the configured maxima and, for CPU
// and memory, the host's size. A refusal says what is allowed.
func (m *Manager) resolveLimits(l store.Limits) (store.Limits, error) {
	d, mx := m.cfg.DefaultLimits, m.cfg.MaxLimits
	size := units.FormatSize
	cpuMax, memMax := mx.CPU, mx.Memory
	if h := m.cfg.HostCPU; h > 0 {
		cpuMax = min(cpuMax, h)
	}
	if h := m.cfg.HostMemory; h > 0 {
		memMax = min(memMax, h)
	}
	switch {
	case l.CPU < 0 || l.Memory < 0 || l.PIDs < 0 || l.OpenFiles < 0 || l.Disk < 0:
		return l, errdefs.Invalid("limits cannot be negative (cpu %g, memory %d, pids %d, open_files %d, disk %d)", l.CPU, l.Memory, l.PIDs, l.OpenFiles, l.Disk)
	case l.Disk > mx.Disk:
		return l, errdefs.Invalid("disk %s is more than the allowed %s", size(l.Disk), size(mx.Disk))
	case l.Disk != 0 && l.Disk < 64<<20:
		return l, errdefs.Invalid("disk %s is below the minimum of 64MiB", size(l.Disk))
	case l.CPU > m.cfg.HostCPU && m.cfg.HostCPU > 0:
		return l, errdefs.Invalid("cpu %g is more than this host has: %g cores; ask for 0.01 to %g", l.CPU, m.cfg.HostCPU, cpuMax)
	case l.CPU > mx.CPU:
		return l, errdefs.Invalid("cpu %g is more than the allowed %g cores; ask for 0.01 to %g", l.CPU, mx.CPU, cpuMax)
	case l.CPU != 0 && l.CPU < 0.01:
		return l, errdefs.Invalid("cpu %g is below the minimum of 0.01 cores; ask for 0.01 to %g", l.CPU, cpuMax)
	case l.Memory > m.cfg.HostMemory && m.cfg.HostMemory > 0:
		return l, errdefs.Invalid("memory %s is more than this host has: %s; ask for 16MiB to %s", size(l.Memory), size(m.cfg.HostMemory), size(memMax))
	case l.Memory > mx.Memory:
		return l, errdefs.Invalid("memory %s is more than the allowed %s; ask for 16MiB to %s", size(l.Memory), size(mx.Memory), size(memMax))
	case l.Memory != 0 && l.Memory < 16<<20:
		return l, errdefs.Invalid("memory %s is below the minimum of 16MiB; ask for 16MiB to %s", size(l.Memory), size(memMax))
	case l.PIDs > mx.PIDs:
		return l, errdefs.Invalid("pids %d is more than the allowed %d", l.PIDs, mx.PIDs)
	case l.PIDs != 0 && l.PIDs < 8:
		return l, errdefs.Invalid("pids %d is below the minimum of 8", l.PIDs)
	case l.OpenFiles > mx.OpenFiles:
		return l, errdefs.Invalid("open_files %d is more than the allowed %d", l.OpenFiles, mx.OpenFiles)
	case l.OpenFiles != 0 && l.OpenFiles < 64:
		return l, errdefs.Invalid("open_files %d is below the minimum of 64", l.OpenFiles)
	}
	if l.CPU == 0 {
		l.CPU = d.CPU
	}
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.PIDs == 0 {
		l.PIDs = d.PIDs
	}
	if l.Disk == 0 {
		l.Disk = d.Disk
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = min(d.OpenFiles, mx.OpenFiles)
	}
	return l, nil
}

func (m *Manager) resolveLifetime(s string) (time.Duration, error) {
	if s == "" {
		return m.cfg.DefaultMaxLifetime, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errdefs.Invalid("invalid max_lifetime %q: use a duration such as 30m or 8h", s)
	}
	if d < m.cfg.MinMaxLifetime || d > m.cfg.MaxMaxLifetime {
		return 0, errdefs.Invalid("max_lifetime %s is out of range: from %s to %s (%s when not given)", d, m.cfg.MinMaxLifetime, m.cfg.MaxMaxLifetime, m.cfg.DefaultMaxLifetime)
	}
	return d, nil
}

func parseTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errdefs.Invalid("invalid timeout %q: use a positive duration such as 500ms, 30s or 5m", s)
	}
	if d > 24*time.Hour {
		return 0, errdefs.Invalid("timeout %s is too long: at most 24h", d)
	}
	return d, nil
}

func envList(base []string, env map[string]string) []string {
	out := append([]string(nil), base...)
	for k, v := range env {
		out = append(out, fmt.Sprintf("%s=%s", k, v))
	}
	return out
}

// resolveDuration reads an optional duration field within [lo, hi].
func resolveDuration(field, s string, def, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errdefs.Invalid("invalid %s %q: use a duration such as 10m or 24h", field, s)
	}
	if d < lo || d > hi {
		return 0, errdefs.Invalid("%s %s is out of range: from %s to %s", field, d, lo, hi)
	}
	return d, nil
}
