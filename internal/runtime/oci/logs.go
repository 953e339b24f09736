package oci

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// A sandbox's agent log (<dir>/agent.log) receives the container's standard output and
// error: runc's own errors and the agent's log, which sandbox code can make the agent
// write to. The agent rate-limits what it logs; the driver caps the file besides, so
// that nothing the sandbox does grows the host's disk by more than about
// 2 × maxAgentLog: a file past maxAgentLog has its tail kept as agent.log.1 and is
// emptied in place (the container appends to the same open file).
//
// An engine that writes logs of its own (Engine.Logs: runsc's boot and gofer, which
// live as long as the sandbox and log what its code makes the sandbox's kernel do)
// writes them in <dir>/engine, capped the same way at maxEngineLog each.
const (
	maxAgentLog     = 1 << 20
	maxEngineLog    = 256 << 10
	logSweepEvery   = 5 * time.Second
	agentLogName    = "agent.log"
	agentLogOldName = "agent.log.1"
	engineLogDir    = "engine"
	// engineLogLines and engineLogBytes bound what a failed start's error quotes of
	// each engine log: its last lines, each cut at engineLineBytes.
	engineLogLines  = 20
	engineLogBytes  = 8 << 10
	engineLineBytes = 300
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
				dir := filepath.Join(d.opts.Root, e.Name())
				capLog(dir, maxAgentLog)
				for _, p := range engineLogs(dir) {
					capFile(p, p+".1", maxEngineLog)
				}
			}
		}
	}
}

// capLog rotates dir's agent log when it has grown past limit.
func capLog(dir string, limit int64) {
	capFile(filepath.Join(dir, agentLogName), filepath.Join(dir, agentLogOldName), limit)
}

// capFile keeps the last limit bytes of the file at path as oldPath and empties it in
// place when it has grown past limit.
func capFile(path, oldPath string, limit int64) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= limit {
		return
	}
	old, err := os.OpenFile(oldPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err == nil {
		io.Copy(old, io.NewSectionReader(f, fi.Size()-limit, limit))
		old.Close()
	}
	f.Truncate(0)
}

// logTail returns up to n bytes from the end of a sandbox's agent log.
func logTail(dir string, n int64) []byte {
	return fileTail(filepath.Join(dir, agentLogName), n)
}

// fileTail returns up to n bytes from the end of the regular file at path.
func fileTail(path string, n int64) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return b
}

// resetEngineLogs makes dir (a sandbox's engine log directory) exist, root's alone,
// and empty, so that what a start's error quotes is that start's.
func resetEngineLogs(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Mkdir(dir, 0o700)
}

// engineLogArgs empties the engine's log directory in dir (a sandbox's directory) and
// returns the flags that have the engine log a start there; none for an engine
// without logs of its own.
func (d *Driver) engineLogArgs(dir string) ([]string, error) {
	if d.opts.Engine.Logs == nil {
		return nil, nil
	}
	logs := filepath.Join(dir, engineLogDir)
	if err := resetEngineLogs(logs); err != nil {
		return nil, err
	}
	return d.opts.Engine.Logs(logs), nil
}

// engineLogs lists the engine's current logs in a sandbox's directory.
func engineLogs(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, engineLogDir, "*.log"))
	return paths
}

// engineTail quotes the last lines of each of the engine's logs in a sandbox's
// directory, for the error of a failed start: at most engineLogLines lines of each,
// each cut at engineLineBytes and with control characters replaced; "" when there
// are none.
func engineTail(dir, engine string) string {
	var b strings.Builder
	for _, p := range engineLogs(dir) {
		data := fileTail(p, engineLogBytes)
		if int64(len(data)) == engineLogBytes {
			// The first line read is likely cut: drop it.
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				data = data[i+1:]
			}
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) == 1 && lines[0] == "" {
			continue
		}
		lines = lines[max(len(lines)-engineLogLines, 0):]
		b.WriteString("\n" + engine + " " + filepath.Base(p) + ", last lines:")
		for _, l := range lines {
			b.WriteString("\n  " + printable(l, engineLineBytes))
		}
	}
	return b.String()
}

// printable returns s with invalid UTF-8 and control characters replaced, cut at n
// bytes.
func printable(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\t' {
			return '?'
		}
		return r
	}, s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
