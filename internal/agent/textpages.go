package agent

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropTextPages shrinks what the agent's resident set counts of its binary. The kernel
// maps file pages around each one touched (fault-around), so code the agent never runs
// again (start-up, package initialisation) stays resident. For each read-only mapping of the executable it asks for no
// read-around from now on (MADV_RANDOM) and lets go of the pages mapped so far
// (MADV_DONTNEED): they are clean copies of the file, so what the agent uses again
// comes back from the page cache one page at a time. Writable mappings are left
// alone, since dropping their private copies would lose data. Errors are ignored:
// this only saves memory.
func dropTextPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00c5e000 r-xp 00000000 fd:01 1234  /path/to/airlock
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe || strings.Contains(fields[1], "w") {
			continue // the path may have spaces, or " (deleted)" once the binary was replaced
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		for _, advice := range []uintptr{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), advice)
		}
	}
}
