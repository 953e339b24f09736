package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/runtime"
)

// writeTree writes files (path relative to root: content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The usage and limits of a cgroup read alike from v2's files (most production hosts)
// and v1's (this one): used memory is usage less the inactive file cache, "max" and
// v1's huge numbers are no limit, CPU time is in nanoseconds either way.
func TestCgroupStatsV1AndV2(t *testing.T) {
	const path = "/airlock/sb_x"
	want := runtime.Stats{MemoryBytes: 300 << 20, MemoryPeak: 400 << 20, MemoryLimit: 1 << 30, CPUNanos: 12_500_000_000,
		CPULimit: 1.5, PIDs: 7, PIDsLimit: 1024, OOMKills: 2, PIDsLimited: 3}
	for _, c := range []struct {
		name  string
		v2    bool
		files map[string]string
	}{
		{"v2", true, map[string]string{
			"airlock/sb_x/memory.current": "419430400\n",
			"airlock/sb_x/memory.stat":    "anon 1\nfile 2\ninactive_file 104857600\nactive_file 3\n",
			"airlock/sb_x/memory.peak":    "419430400\n",
			"airlock/sb_x/memory.max":     "1073741824\n",
			"airlock/sb_x/memory.events":  "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n",
			"airlock/sb_x/cpu.stat":       "usage_usec 12500000\nuser_usec 1\nsystem_usec 2\n",
			"airlock/sb_x/cpu.max":        "150000 100000\n",
			"airlock/sb_x/pids.current":   "7\n",
			"airlock/sb_x/pids.max":       "1024\n",
			"airlock/sb_x/pids.events":    "max 3\n",
		}},
		{"v1", false, map[string]string{
			"memory/airlock/sb_x/memory.usage_in_bytes":     "419430400\n",
			"memory/airlock/sb_x/memory.stat":               "cache 5\nrss 6\ninactive_file 1\ntotal_inactive_file 104857600\n",
			"memory/airlock/sb_x/memory.max_usage_in_bytes": "419430400\n",
			"memory/airlock/sb_x/memory.limit_in_bytes":     "1073741824\n",
			"memory/airlock/sb_x/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
			"cpuacct/airlock/sb_x/cpuacct.usage":            "12500000000\n",
			"cpu/airlock/sb_x/cpu.cfs_quota_us":             "150000\n",
			"cpu/airlock/sb_x/cpu.cfs_period_us":            "100000\n",
			"pids/airlock/sb_x/pids.current":                "7\n",
			"pids/airlock/sb_x/pids.max":                    "1024\n",
			"pids/airlock/sb_x/pids.events":                 "max 3\n",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, c.files)
			old := cgroupRoot
			cgroupRoot = root
			defer func() { cgroupRoot = old }()
			cg := cgroups{v2: c.v2}
			got, err := cg.stats(path)
			if err != nil || got != want {
				t.Errorf("stats = %+v, %v\nwant %+v", got, err, want)
			}
			u, err := cg.usage(path)
			if err != nil || u.MemoryBytes != want.MemoryBytes || u.CPUNanos != want.CPUNanos || u.PIDs != want.PIDs || u.MemoryLimit != 0 {
				t.Errorf("usage = %+v, %v; want the usage figures alone", u, err)
			}
			// No limit: "max" on v2, the page-rounded maximum on v1.
			unlimited := map[string]string{"airlock/sb_x/memory.max": "max\n", "airlock/sb_x/cpu.max": "max 100000\n", "airlock/sb_x/pids.max": "max\n"}
			if !c.v2 {
				unlimited = map[string]string{"memory/airlock/sb_x/memory.limit_in_bytes": "9223372036854771712\n",
					"cpu/airlock/sb_x/cpu.cfs_quota_us": "-1\n", "pids/airlock/sb_x/pids.max": "max\n"}
			}
			writeTree(t, root, unlimited)
			var l runtime.Stats
			cg.limits(path, &l)
			if l.MemoryLimit != 0 || l.CPULimit != 0 || l.PIDsLimit != 0 {
				t.Errorf("limits without limits = %+v; want zeros", l)
			}
			os.RemoveAll(root)
			if _, err := cg.usage(path); err == nil {
				t.Errorf("usage of a cgroup that is gone: no error")
			}
		})
	}
}
