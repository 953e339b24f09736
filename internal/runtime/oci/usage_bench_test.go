package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
	"golang.org/x/sys/unix"
)

// BenchmarkStats measures what the usage collector pays per sandbox: Driver.Usage (and,
// for comparison, Stats) over
// the real cgroup files of N sandboxes (AIRLOCK_BENCH_SANDBOXES, default 200), each
// cgroup holding a real process, with a disk whose statfs is read (a tmpfs stands in
// for the mounted image) and the sockstat of the process's network namespace. It
// reports wall and CPU (user and system, of the whole process) time per sandbox; a collector tick costs that times the running sandboxes, plus one
// read of the store and one dump of the links (see the manager's and sandboxlink's
// benchmarks).
func BenchmarkStats(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root: it makes cgroups")
	}
	n := 200
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_SANDBOXES")); err == nil && v > 0 {
		n = v
	}
	parent := fmt.Sprintf("airlock-bench-%d", os.Getpid())
	d := &Driver{opts: Options{Root: b.TempDir(), CgroupParent: parent}, cg: detectCgroups()}
	ids := make([]string, n)
	var procs []*exec.Cmd
	b.Cleanup(func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		for _, id := range ids {
			d.cg.remove(d.cgroupPath(id))
		}
		d.cg.remove("/" + parent)
	})
	for i := range ids {
		id := fmt.Sprintf("bench%05d", i)
		ids[i] = id
		for _, dir := range d.cg.dirs(d.cgroupPath(id)) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		p := exec.Command("sleep", "600")
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, p)
		d.cg.join(d.cgroupPath(id), p.Process.Pid) // cpuset, without cpus set, refuses: not read
		if err := os.MkdirAll(d.ctlDir(id), 0o700); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(d.ctlDir(id), "init.pid"), []byte(strconv.Itoa(p.Process.Pid)), 0o600)
		os.Symlink("/dev/shm", filepath.Join(d.dir(id), "fs"))
	}
	ctx := context.Background()
	st, err := d.Usage(ctx, ids[0])
	if err != nil || st.PIDs != 1 || st.DiskLimit == 0 {
		b.Fatalf("Usage = %+v, %v; want the process and the disk", st, err)
	}
	for _, c := range []struct {
		name string
		read func(context.Context, string) (runtime.Stats, error)
	}{{"Usage", d.Usage}, {"Stats", d.Stats}} {
		b.Run(c.name, func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				for _, id := range ids {
					if _, err := c.read(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sandbox")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/sandbox")
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
