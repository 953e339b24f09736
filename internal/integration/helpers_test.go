// Package integration holds Airlock's end-to-end tests: a whole node in the test
// process (testenv.NewNode), real runc containers from the default "host" image, and
// checks made both from inside the sandboxes and from the host. The tests need root and
// runc; without them they skip (and fail in CI). They own no production code.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// execTimeout bounds every exec the helpers run.
const execTimeout = "60s"

// randHex returns n random bytes as hex, for names and markers that must not collide.
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// run executes shell in the sandbox and fails the test on an API error.
func run(t testing.TB, n *testenv.Node, ref, shell string) *api.ExecResult {
	t.Helper()
	return n.Exec(t, ref, shell)
}

// mustRun executes shell and fails the test unless it succeeds; it returns stdout.
func mustRun(t testing.TB, n *testenv.Node, ref, shell string) string {
	t.Helper()
	res := run(t, n, ref, shell)
	if res.State != api.ExecSucceeded || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: got state %q exit %d signal %q error %q, want succeeded exit 0\nstdout: %s\nstderr: %s",
			shell, ref, res.State, res.ExitCode, res.Signal, res.Error, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// mustFail executes shell and fails the test if it succeeds; it returns the result.
func mustFail(t testing.TB, n *testenv.Node, ref, shell string) *api.ExecResult {
	t.Helper()
	res := run(t, n, ref, shell)
	if res.State == api.ExecSucceeded || res.ExitCode == 0 {
		t.Fatalf("exec %q in %s: got state %q exit %d (stdout %q), want it to fail",
			shell, ref, res.State, res.ExitCode, res.Stdout)
	}
	return res
}

// wantAPIError fails the test unless err is an API error with this status and code.
func wantAPIError(t testing.TB, what string, err error, status int, code string) *client.Error {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %d %s", what, status, code)
		return nil
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Errorf("%s: got error %v (%T), want an API error %d %s", what, err, err, status, code)
		return nil
	}
	if ce.Status != status || ce.Code != code {
		t.Errorf("%s: got %d %s (%q), want %d %s", what, ce.Status, ce.Code, ce.Message, status, code)
	}
	return ce
}

// cgroupPIDs lists the host pids in a sandbox's pids cgroup (v1) or its unified cgroup (v2).
func cgroupPIDs(t testing.TB, n *testenv.Node, id string) []int {
	t.Helper()
	file := filepath.Join("/sys/fs/cgroup/pids", n.CgroupParent, id, "cgroup.procs")
	if cgroupV2() {
		file = filepath.Join("/sys/fs/cgroup", n.CgroupParent, id, "cgroup.procs")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read the sandbox's cgroup: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: bad pid %q", file, f)
		}
		pids = append(pids, pid)
	}
	return pids
}

func cgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// statusField returns the value of one "Key:\tvalue" line of a /proc/<pid>/status text.
func statusField(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// retry calls f until it returns nil or the deadline passes, and returns f's last error.
// It is for state that settles asynchronously on the far side of an API (a process
// being reaped in a sandbox), where there is nothing to wait on.
func retry(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// background is the context of calls that are not about cancellation.
var background = context.Background()

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, err
}
