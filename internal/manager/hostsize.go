package manager

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// HostSize reads the host's size for Config.HostCPU and HostMemory: the CPUs this
// process may run on and the physical memory (zero where it cannot be read).
func HostSize() (cpus float64, memory int64) {
	cpus = float64(runtime.NumCPU())
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		memory = int64(si.Totalram) * int64(si.Unit)
	}
	return cpus, memory
}
