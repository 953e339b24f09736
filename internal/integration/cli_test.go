package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
	"github.com/airlockhq/airlock/internal/testenv"
)

// daemon is a real `airlock serve` process with a private state dir and cgroup parent.
type daemon struct {
	t      testing.TB
	bin    string
	dir    string
	socket string
	cgroup string
	config string
	cmd    *exec.Cmd
	log    bytes.Buffer
	env    []string // added to the daemon's environment
	// stateMount is the file system the state directory is mounted from, when a test
	// gave it one of its own (it is not a leftover).
	stateMount string
}

func startDaemon(t *testing.T) *daemon { return startDaemonB(t) }

// startDaemonB starts a daemon for a test or a benchmark; extra lines are added to its
// configuration.
func startDaemonB(t testing.TB, extra ...string) *daemon { return startDaemonOn(t, nil, extra...) }

// startDaemonOn is startDaemonB with the state directory on a file system of the test's:
// mount makes one at the (missing) state directory and returns how to remove it, which
// runs after the daemon's own cleanup.
func startDaemonOn(t testing.TB, mount func(t testing.TB, state string) (unmount func()), extra ...string) *daemon {
	t.Helper()
	testenv.RequireHost(t)
	dir := testenv.TempDir(t, "al-cli-")
	d := &daemon{t: t, bin: testenv.Binary(t), dir: dir, socket: filepath.Join(dir, "api.sock"),
		cgroup: "airlock-test-" + filepath.Base(dir), config: filepath.Join(dir, "airlock.yaml")}
	if mount != nil {
		d.stateMount = filepath.Join(dir, "state")
		t.Cleanup(mount(t, d.stateMount))
	}
	cfg := fmt.Sprintf("state_dir: %s\nsecrets_dir: %s\nsocket: %s\ncgroup_parent: %s\nlog_level: warn\nmin_max_lifetime: 1s\nlive_cap: 1000\nnetwork: {enabled: true, subnet: 10.213.%d.0/24, table: %s, host_prefix: c%s}\ndefault_limits: {cpu: 1, memory: 256MiB, pids: 512, open_files: 1024, disk: 1GiB}\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "secrets"), d.socket, d.cgroup, time.Now().UnixNano()%250, d.table(), d.cgroup[len(d.cgroup)-4:])
	if rt := os.Getenv("AIRLOCK_TEST_RUNTIME"); rt != "" {
		cfg += "default_runtime: " + rt + "\n"
	}
	for _, line := range extra {
		cfg += line + "\n"
	}
	if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(func() {
		d.stop(syscall.SIGTERM)
		d.start()
		var list []api.Sandbox
		if out, _, code := d.airlock("ls", "-o", "json"); code == 0 {
			json.Unmarshal([]byte(out), &list)
		}
		for _, sb := range list {
			if sb.State != api.StateTerminated {
				d.airlock("rm", sb.Name)
			}
		}
		d.stop(syscall.SIGTERM)
		if err := secret.Unmount(filepath.Join(dir, "secrets")); err != nil { // the daemon leaves it for sandboxes
			t.Errorf("unmount the daemon's secrets tmpfs: %v", err)
		}
		d.assertClean()
		exec.Command("nft", "delete", "table", "inet", d.table()).Run()
		testenv.RemoveHostLocks("cgroup-"+d.cgroup, "nftables-"+d.table(), "veth-c"+d.cgroup[len(d.cgroup)-4:])

		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log.String())
		}
		os.RemoveAll(dir)
	})
	return d
}

// table is the daemon's own nftables table, so that daemons of runs side by side on one
// machine never share one.
func (d *daemon) table() string { return "airlock_c" + d.cgroup[len(d.cgroup)-4:] }

func (d *daemon) start() {
	d.t.Helper()
	if !d.startWithin(30 * time.Second) {
		// Not up: startWithin ended it, since the caller's cleanup may not be registered yet.
		d.t.Fatalf("daemon did not come up:\n%s", d.log.String())
	}
}

func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	d.cmd.Wait()
	d.cmd = nil
}

// airlock runs the CLI against this daemon.
func (d *daemon) airlock(args ...string) (stdout, stderr string, code int) {
	return d.airlockIn("", args...)
}

func (d *daemon) airlockIn(stdin string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, append([]string{"--socket", d.socket}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	return testenv.Run(cmd)
}

func (d *daemon) must(args ...string) string {
	d.t.Helper()
	out, errOut, code := d.airlock(args...)
	if code != 0 {
		d.t.Fatalf("airlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func (d *daemon) get(name string) api.Sandbox {
	d.t.Helper()
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(d.must("get", name, "-o", "json")), &sb); err != nil {
		d.t.Fatalf("get %s: %v", name, err)
	}
	return sb
}

// runcContainers lists the runc containers of this daemon.
// runcContainers lists the node's containers, runc's and (when it has them) runsc's.
func (d *daemon) runcContainers() []string {
	out, _ := exec.Command("runc", "--root", filepath.Join(d.dir, "state", "runc"), "list", "-q").Output()
	list := strings.Fields(string(out))
	if _, err := os.Stat(filepath.Join(d.dir, "state", "runsc")); err == nil {
		if path, ok := gvisor.Find(); ok {
			out, _ := exec.Command(path, "--root", filepath.Join(d.dir, "state", "runsc"), "list", "-quiet").Output()
			list = append(list, strings.Fields(string(out))...)
		}
	}
	return list
}

func (d *daemon) assertClean() {
	d.t.Helper()
	if c := d.runcContainers(); len(c) > 0 {
		d.t.Errorf("runc containers left: %v", c)
	}
	if m := slices.DeleteFunc(testenv.MountsUnder(d.dir), func(m string) bool { return m == d.stateMount }); len(m) > 0 {
		d.t.Errorf("mounts left: %v", m)
	}
	for _, sbDir := range []string{"sandboxes", "sandboxes-runsc"} {
		entries, _ := os.ReadDir(filepath.Join(d.dir, "state", sbDir))
		for _, e := range entries {
			d.t.Errorf("sandbox directory left: %s/%s", sbDir, e.Name())
		}
	}
	for _, cg := range append(testenv.CgroupDirs(d.cgroup), testenv.CgroupDirs(d.cgroup+"-runsc")...) {
		sub, _ := os.ReadDir(cg)
		for _, e := range sub {
			if e.IsDir() {
				d.t.Errorf("cgroup left: %s/%s", cg, e.Name())
			}
		}
		os.Remove(cg)
	}
}

// TestCLI drives the built binary end to end: a real daemon process, the CLI verbs,
// exit codes, a daemon restart that keeps sandboxes, and suspend/resume.
func TestCLI(t *testing.T) {
	d := startDaemon(t)

	// The first start made the administrator, whose token only root can read; root on
	// the socket is that administrator.
	tokenFile := filepath.Join(d.dir, "state", "admin.token")
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.token: %v, %v; want a 0600 file", fi, err)
	}
	if out := d.must("whoami"); !strings.Contains(out, "local (roles: admin)") {
		t.Errorf("whoami over the socket = %q", out)
	}
	if out := d.must("audit", "verify"); !strings.Contains(out, "intact") {
		t.Errorf("audit verify = %q", out)
	}

	d.must("create", "e2e", "--memory", "128M", "--label", "suite=cli")
	out, _, code := d.airlock("exec", "e2e", "--", "sh", "-c", "echo hi; echo oops >&2; exit 7")
	if out != "hi\n" || code != 7 {
		t.Errorf("exec: stdout %q exit %d; want \"hi\\n\" and the command's own exit code 7", out, code)
	}
	if _, _, code := d.airlock("exec", "e2e", "--timeout", "200ms", "--", "sleep", "5"); code != 124 {
		t.Errorf("exec past its timeout exited %d; want 124", code)
	}
	if _, _, code := d.airlock("exec", "e2e", "--", "no-such-binary"); code != 127 {
		t.Errorf("exec of a missing binary exited %d; want 127", code)
	}

	local := filepath.Join(d.dir, "data.bin")
	payload := bytes.Repeat([]byte("airlock\x00\xff"), 50000)
	os.WriteFile(local, payload, 0o640)
	d.must("cp", local, "e2e:/root/data.bin")
	back := filepath.Join(d.dir, "back.bin")
	d.must("cp", "e2e:/root/data.bin", back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, payload) {
		t.Errorf("cp round trip changed the bytes (%d in, %d out)", len(payload), len(got))
	}
	if _, _, code := d.airlock("cp", local, "e2e:/../../etc/x"); code != 1 {
		t.Errorf("cp to a path with .. exited %d; want 1 (refused)", code)
	}

	var list []api.Sandbox
	json.Unmarshal([]byte(d.must("ls", "--label", "suite=cli", "-o", "json")), &list)
	if len(list) != 1 || list[0].Name != "e2e" || list[0].State != api.StateRunning {
		t.Errorf("ls --label suite=cli = %+v; want the one running sandbox e2e", list)
	}
	if _, errOut, code := d.airlock("create", "Bad_Name"); code != 1 || !strings.Contains(errOut, "invalid_argument") {
		t.Errorf("create with a bad name: exit %d, stderr %q; want 1 and invalid_argument", code, errOut)
	}

	// Stopping the daemon does not stop sandboxes; a new daemon reattaches.
	d.stop(syscall.SIGTERM)
	if c := d.runcContainers(); len(c) != 1 {
		t.Fatalf("after the daemon stopped, runc containers = %v; want the sandbox still running", c)
	}
	d.start()
	if out := d.must("exec", "e2e", "--", "cat", "/root/data.bin"); out != string(payload) {
		t.Errorf("after a daemon restart the sandbox's file reads back %d bytes; want %d", len(out), len(payload))
	}

	// Suspend keeps the root filesystem's writes and wipes tmpfs; a touch resumes.
	d.must("exec", "e2e", "--", "sh", "-c", "echo keep > /home/user/k; echo keep > /var/tmp/k; echo gone > /tmp/g")
	d.must("suspend", "e2e")
	d.must("suspend", "e2e") // idempotent
	if sb := d.get("e2e"); sb.State != api.StateSuspended || sb.Generation != 1 {
		t.Errorf("after suspend: state %s generation %d; want suspended 1", sb.State, sb.Generation)
	}
	if c := d.runcContainers(); len(c) != 0 {
		t.Errorf("a suspended sandbox still has containers %v", c)
	}
	out = d.must("exec", "e2e", "--", "sh", "-c", "cat /home/user/k /var/tmp/k; ls /tmp | wc -l; cat /root/data.bin | wc -c")
	if want := fmt.Sprintf("keep\nkeep\n0\n%d\n", len(payload)); out != want {
		t.Errorf("after a transparent resume: %q; want %q", out, want)
	}
	if sb := d.get("e2e"); sb.State != api.StateRunning || sb.Generation != 2 {
		t.Errorf("after resume: state %s generation %d; want running 2", sb.State, sb.Generation)
	}
	events := d.must("events", "e2e", "-o", "json")
	if !strings.Contains(events, `"suspended"`) {
		t.Errorf("events of e2e do not mention the suspension: %s", events)
	}

	// An ephemeral run leaves nothing.
	if out := d.must("run", "--", "sh", "-c", "echo ephemeral"); out != "ephemeral\n" {
		t.Errorf("run printed %q", out)
	}
	d.must("rm", "e2e")
	if sb := d.get("e2e"); sb.State != api.StateTerminated {
		t.Errorf("after rm the state is %s; want terminated", sb.State)
	}
	if _, errOut, code := d.airlock("exec", "e2e", "--", "true"); code != 1 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("exec in a terminated sandbox: exit %d stderr %q; want 1 and failed_precondition", code, errOut)
	}
	d.waitCleanups() // rm and run answer before the containers go
	if c := d.runcContainers(); len(c) != 0 {
		t.Errorf("containers left after rm and run: %v", c)
	}

	bad := filepath.Join(d.dir, "bad.yaml")
	os.WriteFile(bad, []byte("state_dir: /x\nsokcet: /y\n"), 0o600)
	cc := exec.Command(d.bin, "check-config", bad)
	var ccErr bytes.Buffer
	cc.Stderr = &ccErr
	cc.Run()
	if code, errOut := cc.ProcessState.ExitCode(), ccErr.String(); code != 1 || !strings.Contains(errOut, "sokcet") {
		t.Errorf("check-config with an unknown key: exit %d stderr %q; want 1 naming the key", code, errOut)
	}
}

// TestCrashRecovery kills the daemon with SIGKILL in the middle of operations and
// checks that after a restart every sandbox is where its record says, no operation is
// stuck, and nothing leaked.
func TestCrashRecovery(t *testing.T) {
	d := startDaemon(t)
	d.must("create", "base")
	d.must("create", "tosuspend")
	d.must("create", "tosnap")
	d.must("exec", "tosnap", "--", "sh", "-c", "head -c 30M /dev/urandom > /root/data")
	for i, step := range []struct {
		name string
		args []string
	}{
		{"create", []string{"create", "crash-new"}},
		{"exec", []string{"exec", "base", "--", "sleep", "3"}},
		{"suspend", []string{"suspend", "tosuspend"}},
		{"snapshot", []string{"snapshot", "create", "tosnap"}},
		{"fork", []string{"fork", "tosnap", "crash-fork"}},
		{"terminate", []string{"rm", "base"}},
	} {
		cmd := exec.Command(d.bin, "--socket", d.socket)
		cmd.Args = append(cmd.Args, step.args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(20+15*i) * time.Millisecond)
		d.stop(syscall.SIGKILL)
		cmd.Wait()
		d.start()

		var list []api.Sandbox
		json.Unmarshal([]byte(d.must("ls", "-o", "json")), &list)
		running := map[string]bool{}
		for _, sb := range list {
			switch sb.State {
			case api.StateRunning:
				running["airlock-"+sb.ID] = true
				if sb.Name == "tosnap" {
					// A snapshot interrupted mid-freeze must not leave the sandbox frozen.
					if out := d.must("exec", sb.Name, "--", "sh", "-c", "wc -c < /root/data"); out != "31457280\n" {
						t.Errorf("after a SIGKILL during %s: tosnap's data reads %q", step.name, out)
					}
				}
				d.must("exec", sb.Name, "--", "true")
			case api.StateSuspended, api.StateTerminated:
			default:
				t.Errorf("after a SIGKILL during %s: sandbox %s is %s; want running, suspended or terminated", step.name, sb.Name, sb.State)
			}
		}
		for _, c := range d.runcContainers() {
			if !running[c] {
				t.Errorf("after a SIGKILL during %s: container %s has no running record", step.name, c)
			}
		}
		if len(d.runcContainers()) != len(running) {
			t.Errorf("after a SIGKILL during %s: %d containers for %d running sandboxes", step.name, len(d.runcContainers()), len(running))
		}
	}
	// gc finds nothing after recovery; a planted leftover is listed by --dry-run, then removed.
	if out := d.must("gc", "--dry-run"); !strings.Contains(out, "nothing to remove") {
		t.Errorf("gc --dry-run after recovery: %q; want nothing to remove", out)
	}
	planted := filepath.Join(d.dir, "state", "sandboxes", "sb_leftover0000001")
	os.MkdirAll(filepath.Join(planted, "fs", "upper"), 0o700)
	if out := d.must("gc", "--dry-run"); !strings.Contains(out, "sb_leftover0000001") {
		t.Errorf("gc --dry-run did not list the leftover: %q", out)
	}
	if _, err := os.Stat(planted); err != nil {
		t.Errorf("gc --dry-run removed the leftover")
	}
	d.must("gc")
	if _, err := os.Stat(planted); err == nil {
		t.Errorf("gc did not remove the leftover")
	}
	// No operation is left pending or running.
	d.stop(syscall.SIGTERM)
	st, err := sqlite.Open(filepath.Join(d.dir, "state", "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	ops, _ := st.ListOperations(context.Background(), store.OperationFilter{States: []string{store.OpPending, store.OpRunning}})
	st.Close()
	for _, op := range ops {
		t.Errorf("operation %s (%s) is still %s after recovery", op.ID, op.Kind, op.State)
	}
	d.start()
}

// TestLifetimeWhileDaemonStopped: the maximum lifetime ends a sandbox on the agent's own
// clock even while the daemon is stopped, and the restarted daemon records it.
func TestLifetimeWhileDaemonStopped(t *testing.T) {
	d := startDaemon(t)
	d.must("create", "shortlived", "--max-lifetime", "3s")
	d.stop(syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for len(d.runcContainers()) > 0 && time.Now().Before(deadline) {
		out, _ := exec.Command("runc", "--root", filepath.Join(d.dir, "state", "runc"), "list", "-f", "json").Output()
		if strings.Contains(string(out), `"stopped"`) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, _ := exec.Command("runc", "--root", filepath.Join(d.dir, "state", "runc"), "list", "-f", "json").Output()
	if strings.Contains(string(out), `"running"`) {
		t.Fatalf("the sandbox still runs past its maximum lifetime with the daemon stopped: %s", out)
	}
	d.start()
	sb := d.get("shortlived")
	if sb.State != api.StateTerminated || !strings.Contains(sb.Failure, "maximum lifetime") {
		t.Errorf("after restart: state %s failure %q; want terminated for its maximum lifetime", sb.State, sb.Failure)
	}
	d.waitCleanups()
	if c := d.runcContainers(); len(c) != 0 {
		t.Errorf("containers left: %v", c)
	}
}
