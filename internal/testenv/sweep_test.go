package testenv

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/sweep"
)

// sweepChildEnv makes TestSweepAfterKilledTest's test binary the killed test process.
const sweepChildEnv = "AIRLOCK_TEST_SWEEP_CHILD"

// TestSweepAfterKilledTest runs a test process that starts a networked node with a
// sandbox and is killed with SIGKILL, as go test's -timeout kills one (no cleanup
// runs), and checks that Sweep removes everything it left: the container and its
// processes, mounts, cgroups, nftables table, veths, secrets tmpfs and directories.
func TestSweepAfterKilledTest(t *testing.T) {
	if os.Getenv(sweepChildEnv) != "" {
		n := NewNode(t, Options{Network: true})
		n.Create(t, api.CreateSandboxRequest{Name: "left"})
		os.Stdout.WriteString("DIR " + n.Dir + "\n")
		time.Sleep(10 * time.Minute) // until killed
		return
	}
	RequireHost(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepAfterKilledTest$", "-test.v")
	cmd.Env = append(os.Environ(), sweepChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	dir := ""
	var said []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "DIR "); ok {
			dir = d
			break
		}
		said = append(said, sc.Text())
	}
	if dir == "" {
		t.Fatalf("the test process ended before its node had a sandbox:\n%s", strings.Join(said, "\n"))
	}
	rec, err := sweep.ReadRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if c := runcList(filepath.Join(dir, "runc")); len(c) != 1 {
		t.Fatalf("the killed test left containers %v; want its one sandbox's (else this test shows nothing)", c)
	}
	if len(MountsUnder(rec.SecretsDir)) == 0 || len(MountsUnder(dir)) == 0 {
		t.Fatalf("the killed test left no mounts under %s or %s; want some (else this test shows nothing)", dir, rec.SecretsDir)
	}

	var log strings.Builder
	Sweep(&log)
	if !strings.Contains(log.String(), dir) {
		t.Errorf("Sweep said %q; want a line naming %s", log.String(), dir)
	}
	for _, root := range []string{dir, rec.SecretsDir} {
		if m := MountsUnder(root); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
		}
		if _, err := os.Stat(root); err == nil {
			t.Errorf("directory left: %s (containers in it: %v)", root, runcList(filepath.Join(root, "runc")))
		}
	}
	for _, p := range rec.CgroupParents { // a process left would keep its cgroup
		for _, d := range CgroupDirs(p) {
			t.Errorf("cgroup left: %s", d)
		}
	}
	if err := exec.Command("nft", "list", "table", "inet", rec.Table).Run(); err == nil {
		t.Errorf("nftables table inet %s left", rec.Table)
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, rec.VethPrefix) {
			t.Errorf("veth left: %s", i.Name)
		}
	}
}

// TestSweepSparesLiveOwners checks that Sweep leaves a directory whose test process
// lives (this one's) and one with no owner mark at all.
func TestSweepSparesLiveOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Sweep only runs as root")
	}
	mine := TempDir(t, "al-live-")
	defer os.RemoveAll(mine)
	unmarked, err := os.MkdirTemp("/tmp", "al-unmarked-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(unmarked)
	Sweep(testWriter{t})
	for _, d := range []string{mine, unmarked} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("Sweep removed %s: %v", d, err)
		}
	}
}

// runcList lists the containers in runc's state root root.
func runcList(root string) []string {
	out, _ := exec.Command("runc", "--root", root, "list", "-q").Output()
	return strings.Fields(string(out))
}
