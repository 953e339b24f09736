package daemon_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testenv"
)

// daemonDir makes a directory under /tmp for a test daemon's state and sockets (mode
// 0711, as the daemon wants the parents of its state) and names a cgroup parent of its
// own. Its cleanup, registered first and so run after the test's own (which stop the
// daemon), fails the test for a mount left under the directory or a sandbox cgroup left
// under the parent, then removes the parent, its host lock and the directory.
func daemonDir(t *testing.T, prefix string) (dir, cgroup string) {
	t.Helper()
	dir = testenv.TempDir(t, prefix)
	cgroup = "airlock-test-" + filepath.Base(dir)
	t.Cleanup(func() {
		if m := testenv.MountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
		}
		for _, d := range testenv.CgroupDirs(cgroup) {
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("cgroup left: %s", filepath.Join(d, e.Name()))
				}
			}
			os.Remove(d)
		}
		testenv.RemoveHostLocks("cgroup-" + cgroup)
		os.RemoveAll(dir)
	})
	return dir, cgroup
}

// startDaemon starts `bin serve --config cfg` and returns once it says it is serving;
// the test fails if it ends first or says nothing for two minutes. Its log is drained
// from then on, so it never blocks on it. The caller stops it.
func startDaemon(t *testing.T, bin, cfg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var log []string
		for sc.Scan() {
			if strings.Contains(sc.Text(), "airlock serving") {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
			log = append(log, sc.Text())
		}
		ready <- fmt.Errorf("the daemon ended before serving:\n%s", strings.Join(log, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Wait()
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the daemon did not say it was serving")
	}
	return cmd
}

// writeConfig writes dir/airlock.yaml for a test daemon of its own in dir (state,
// secrets and socket api.sock there, the cgroup parent cgroup, no runsc, no sandbox
// network) with extra lines, and returns its path.
func writeConfig(t *testing.T, dir, cgroup string, extra ...string) string {
	t.Helper()
	body := fmt.Sprintf("state_dir: %s\nsecrets_dir: %s\nsocket: %s\ncgroup_parent: %s\nrunsc: \"off\"\nnetwork: {enabled: false}\nlog_level: info\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "secrets"), filepath.Join(dir, "api.sock"), cgroup)
	for _, l := range extra {
		body += l + "\n"
	}
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
