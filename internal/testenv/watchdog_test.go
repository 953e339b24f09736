package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// watchdogChildEnv makes the watchdog tests' test binary the hanging test process; its
// value is a directory the child reports into.
const watchdogChildEnv = "AIRLOCK_TEST_WATCHDOG_CHILD"

// TestWatchdogFailsAHangingTest runs a test that hangs until its watchdog's stop
// unblocks it, with a per-test limit of two seconds and a -timeout of ten minutes: the
// test must fail with the goroutines' stacks, and its cleanups must run.
func TestWatchdogFailsAHangingTest(t *testing.T) {
	if dir := os.Getenv(watchdogChildEnv); dir != "" {
		unblock := make(chan struct{})
		t.Cleanup(func() { os.WriteFile(filepath.Join(dir, "cleaned"), nil, 0o600) })
		Watchdog(t, func() { close(unblock) })
		<-unblock // a call that hangs until the node is closed under it
		t.Fatal("the call failed")
	}
	dir := t.TempDir()
	out, err := childTest(t, "TestWatchdogFailsAHangingTest", dir, "-test.timeout=10m", "AIRLOCK_TEST_LIMIT=2s")
	if err == nil || !strings.Contains(out, "still running at the per-test limit of 2s") || !strings.Contains(out, "goroutine ") {
		t.Errorf("the hanging test: %v, output:\n%s\nwant it failed by its watchdog, with the goroutines' stacks", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "cleaned")); err != nil {
		t.Errorf("the hanging test's cleanup did not run: %v", err)
	}
}

// TestProcessWatchdog runs a test that hangs for good under a -timeout of six seconds:
// before go test's panic, the process must remove the directories it marked and exit
// with the goroutines' stacks.
func TestProcessWatchdog(t *testing.T) {
	if dir := os.Getenv(watchdogChildEnv); dir != "" {
		mine := TempDir(t, "al-wd-")
		os.WriteFile(filepath.Join(dir, "made"), []byte(mine), 0o600)
		processWatchdog()
		select {}
	}
	dir := t.TempDir()
	out, err := childTest(t, "TestProcessWatchdog", dir, "-test.timeout=6s")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "still running") || strings.Contains(out, "panic: test timed out") {
		t.Errorf("the hanging process: %v, output:\n%s\nwant exit status 2 from the process watchdog before the -timeout panic", err, out)
	}
	made, err := os.ReadFile(filepath.Join(dir, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(string(made)); err == nil {
		t.Errorf("the hanging process left its directory %s", made)
		os.RemoveAll(string(made))
	}
}

// childTest runs this test binary's test name as a child (with env entries of the form
// K=V and other arguments as flags) reporting into dir, and returns its output.
func childTest(t *testing.T, name, dir string, args ...string) (string, error) {
	flags := []string{"-test.run=^" + name + "$", "-test.v"}
	env := append(os.Environ(), watchdogChildEnv+"="+dir)
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else {
			env = append(env, a)
		}
	}
	cmd := exec.Command(os.Args[0], flags...)
	cmd.Env = env
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
		}
	}()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
