package oci

import (
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox's agent log (<dir>/agent.log) receives the container's standard output and
// error: runc's own errors and the agent's log, which sandbox code can make the agent
// write to. The agent rate-limits what it logs; the driver caps the file besides, so
// that nothing the sandbox does grows the host's disk by more than about
// 2 × maxAgentLog: a file past maxAgentLog has its tail kept as agent.log.1 and is
// emptied in place (the container appends to the same open file).
const (
	maxAgentLog     = 1 << 20
	logSweepEvery   = 5 * time.Second
	agentLogName    = "agent.log"
	agentLogOldName = "agent.log.1"
)

// sweepLogs caps every sandbox's agent log until stop is closed.
func (d *Driver) sweepLogs(stop <-chan struct{}) {
	t := time.NewTicker(logSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		entries, _ := os.ReadDir(d.opts.Root)
		for _, e := range entries {
			if e.IsDir() {
				capLog(filepath.Join(d.opts.Root, e.Name()), maxAgentLog)
			}
		}
	}
}

// capLog rotates dir's agent log when it has grown past limit.
func capLog(dir string, limit int64) {
	f, err := os.OpenFile(filepath.Join(dir, agentLogName), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= limit {
		return
	}
	old, err := os.OpenFile(filepath.Join(dir, agentLogOldName), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err == nil {
		io.Copy(old, io.NewSectionReader(f, fi.Size()-limit, limit))
		old.Close()
	}
	f.Truncate(0)
}

// logTail returns up to n bytes from the end of a sandbox's agent log.
func logTail(dir string, n int64) []byte {
	f, err := os.OpenFile(filepath.Join(dir, agentLogName), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return b
}
