package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
	"github.com/airlockhq/airlock/internal/testenv"
)

// crashKillsEnv sets how many times TestCrashUnderLoad kills the daemon (a long run:
// AIRLOCK_CRASH_KILLS=500 go test -timeout 2h -run TestCrashUnderLoad ./internal/integration/).
const crashKillsEnv = "AIRLOCK_CRASH_KILLS"

// TestCrashUnderLoad: eight clients work at once (create, exec, suspend, resume, fork,
// snapshot, rm, image pull, secret bind) while the daemon is killed with SIGKILL at
// random moments and restarted, and for a stretch of the run the state directory's file
// system is full. After the last restart everything a client was told succeeded is
// there and as it was told, no operation is left in flight, the store is whole, and the
// host holds nothing no live record owns.
func TestCrashUnderLoad(t *testing.T) {
	kills := 40
	if v := os.Getenv(crashKillsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of kills", crashKillsEnv, v)
		}
		kills = n
	}
	host, refs := loadRegistry(t, 12)
	d := startDaemonOn(t, ext4State(2<<30), "images: {insecure_registries: ["+host+"]}")
	c, err := client.New(client.Options{Socket: d.socket})
	if err != nil {
		t.Fatal(err)
	}

	// Stop killing with enough time left to check, clean up and report.
	stopAt := time.Now().Add(time.Duration(kills) * 10 * time.Second)
	if dl, ok := t.Deadline(); ok && dl.Add(-4*time.Minute).Before(stopAt) {
		stopAt = dl.Add(-4 * time.Minute)
	}
	var full atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	clients := make([]*loadClient, 8)
	var wg sync.WaitGroup
	for i := range clients {
		clients[i] = newLoadClient(t, c, i, refs, &full)
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i].loop(ctx)
		}()
	}
	stopClients := sync.OnceFunc(func() { cancel(); wg.Wait() })
	defer stopClients()

	// The disk is full from a third of the kills to a half of them: several kills and
	// restarts happen on a full disk.
	fullFrom, fullTo := kills/3, kills/2
	var unfill func()
	done := 0
	for ; done < kills && time.Now().Before(stopAt); done++ {
		switch done {
		case fullFrom:
			unfill = fillDisk(t, d.stateMount)
			full.Store(true)
		case fullTo:
			full.Store(false)
			unfill()
			unfill = nil
		}
		time.Sleep(time.Duration(300+rand.IntN(2200)) * time.Millisecond)
		d.stop(syscall.SIGKILL)
		if !d.startWithin(60 * time.Second) {
			stopClients()
			t.Fatalf("after kill %d (disk full: %v) the daemon did not come up:\n%s", done+1, full.Load(), d.logTail())
		}
	}
	if unfill != nil {
		full.Store(false)
		unfill()
	}
	// Let the clients run on a disk with room, then stop them and kill once more, so
	// the checks read what a recovery made.
	time.Sleep(3 * time.Second)
	stopClients()
	d.stop(syscall.SIGKILL)
	d.start()
	t.Logf("%d kills, %d of them on a full disk", done, min(done, fullTo)-min(done, fullFrom))

	var sum loadClient
	for _, lc := range clients {
		sum.acked += lc.acked
		sum.failed += lc.failed
		sum.fullErrs = append(sum.fullErrs, lc.fullErrs...)
		sum.kinds = mergeCounts(sum.kinds, lc.kinds)
	}
	t.Logf("acknowledged %d calls, %d failed or unknown; acknowledged by kind: %v", sum.acked, sum.failed, sum.kinds)
	if sum.acked < len(clients)*5 {
		t.Errorf("only %d calls were acknowledged in the whole run: the load did not run", sum.acked)
	}
	logFullDiskErrors(t, sum.fullErrs)
	t.Logf("sandbox disks repaired: %d", strings.Count(d.log.String(), "sandbox disk repaired"))

	list, err := c.List(background, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byID, byState := map[string]api.Sandbox{}, map[string]int{}
	for _, sb := range list {
		byID[sb.ID] = sb
		byState[sb.State]++
		switch sb.State {
		case api.StateRunning, api.StateSuspended, api.StateTerminated:
		default:
			t.Errorf("after recovery sandbox %s is %s (%s); want running, suspended or terminated", sb.Name, sb.State, sb.Failure)
		}
	}
	t.Logf("sandboxes after recovery: %v", byState)
	checkHostAgainstRecords(t, d, list) // first: the checks below resume sandboxes
	for _, lc := range clients {
		lc.check(t, byID, func(id string) string { out, _, _ := d.airlock("events", id); return out })
	}

	// The node works after all that: a create, an exec, a snapshot and an rm succeed.
	if _, err := c.Create(background, api.CreateSandboxRequest{Name: "after-crashes"}); err != nil {
		t.Errorf("create after the run: %v", err)
	} else {
		if res, err := c.Exec(background, "after-crashes", api.ExecRequest{Shell: "echo ok > /root/ok", Timeout: execTimeout}); err != nil || res.ExitCode != 0 {
			t.Errorf("exec after the run: %+v, %v", res, err)
		}
		if _, err := c.Snapshot(background, "after-crashes", nil); err != nil {
			t.Errorf("snapshot after the run: %v", err)
		}
		if _, err := c.Terminate(background, "after-crashes"); err != nil {
			t.Errorf("rm after the run: %v", err)
		}
	}

	// The store is whole and holds no operation in flight.
	d.stop(syscall.SIGTERM)
	checkStore(t, filepath.Join(d.stateMount, "airlock.db"))
	d.start()
}

// loadRegistry serves n small random images on loopback and returns the registry's
// host and the images' references.
func loadRegistry(t *testing.T, n int) (string, []string) {
	t.Helper()
	reg := httptest.NewServer(registry.New(quietRegistry()))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	var refs []string
	for i := range n {
		img, err := random.Image(32<<10, 2)
		if err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprintf("%s/load/app%d:1", host, i)
		r, _ := name.ParseReference(ref, name.Insecure)
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	return host, refs
}

// ext4State makes the state directory an ext4 file system of size bytes (a sparse image
// beside it, loop-mounted, no blocks reserved for root: the daemon is root, and a full
// disk must be full for it too).
func ext4State(size int64) func(t testing.TB, state string) func() {
	return loopState(size, "mkfs.ext4", "-q", "-F", "-m", "0")
}

// loopState makes the state directory a file system of size bytes, made by the command
// mkfs (its last argument the image) on a sparse image beside it, loop-mounted.
func loopState(size int64, mkfs ...string) func(t testing.TB, state string) func() {
	return func(t testing.TB, state string) func() {
		t.Helper()
		img := state + ".img"
		f, err := os.Create(img)
		if err == nil {
			err = f.Truncate(size)
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(mkfs[0], append(mkfs[1:], img)...).CombinedOutput(); err != nil {
			os.Remove(img)
			t.Fatalf("%s: %v: %s", mkfs[0], err, out)
		}
		if err := os.MkdirAll(state, 0o711); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "loop", img, state).CombinedOutput(); err != nil {
			os.Remove(img)
			t.Fatalf("mount the state file system: %v: %s", err, out)
		}
		return func() {
			if err := unix.Unmount(state, 0); err != nil {
				// Busy: sandboxes are left. Detaching would hide them; leave it to see.
				t.Errorf("unmount the state file system: %v; left mounted at %s", err, state)
				return
			}
			os.Remove(state)
			os.Remove(img)
			os.Remove(filepath.Dir(state)) // the daemon's directory, emptied but for the mount
		}
	}
}

// fillDisk fills the file system at dir to the last block and returns how to free it.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, ".filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	var off int64
	for n := int64(st.Bavail) * st.Bsize; n >= 4096; {
		if err := unix.Fallocate(int(f.Fd()), 0, off, n); err != nil {
			n /= 2
			continue
		}
		off += n
	}
	buf := make([]byte, 512)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	unix.Statfs(dir, &st)
	t.Logf("state disk filled: %d bytes in the filler, %d bytes free", off, int64(st.Bavail)*st.Bsize)
	free = sync.OnceFunc(func() {
		if err := os.Remove(path); err != nil {
			t.Errorf("free the state disk: %v", err)
		}
	})
	t.Cleanup(free) // before the daemon's cleanup, which starts it to remove sandboxes
	return free
}

// startWithin starts the daemon and reports whether it answered within d.
func (d *daemon) startWithin(within time.Duration) bool {
	d.cmd = exec.Command(d.bin, "serve", "--config", d.config)
	d.cmd.Env = append(os.Environ(), d.env...)
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	if err := d.cmd.Start(); err != nil {
		d.cmd = nil
		return false
	}
	c, err := client.New(client.Options{Socket: d.socket})
	if err != nil {
		d.stop(syscall.SIGKILL)
		return false
	}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		// Up once it answers, even to say it is degraded (a full disk).
		if _, err := c.Status(background); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), d.socket) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.stop(syscall.SIGKILL)
	return false
}

// logTail is the end of the daemon's log.
func (d *daemon) logTail() string {
	s := d.log.String()
	return s[max(0, len(s)-8000):]
}

// logFullDiskErrors reports how the calls made while the state disk was full failed.
func logFullDiskErrors(t *testing.T, errs []string) {
	t.Helper()
	counts := map[string]int{}
	for _, e := range errs {
		counts[e]++
	}
	t.Logf("errors while the disk was full: %v", counts)
}

// checkHostAgainstRecords: every container, network, mount and sandbox directory on
// the host belongs to a live record, and gc finds nothing.
func checkHostAgainstRecords(t *testing.T, d *daemon, list []api.Sandbox) {
	t.Helper()
	running, live, states := map[string]bool{}, map[string]bool{}, map[string]string{}
	for _, sb := range list {
		states[sb.ID] = sb.State
		if sb.State == api.StateRunning {
			running[sb.ID] = true
		}
		if sb.State != api.StateTerminated {
			live[sb.ID] = true
		}
	}
	for _, c := range d.runcContainers() {
		if id := strings.TrimPrefix(c, "airlock-"); !running[id] {
			t.Errorf("container %s has no running record (its record is %q); its events:\n%s", c, states[id], d.must("events", id))
		}
	}
	if got := len(d.runcContainers()); got != len(running) {
		t.Errorf("%d containers for %d running sandboxes", got, len(running))
	}
	for _, e := range dirEntries(filepath.Join(d.stateMount, "sandboxes")) {
		if !live[e] {
			t.Errorf("sandbox directory %s has no live record", e)
		}
	}
	for _, e := range dirEntries(filepath.Join(d.stateMount, "network", "netns")) {
		if !running[e] {
			t.Errorf("network namespace %s has no running record", e)
		}
	}
	for _, m := range testenv.MountsUnder(d.stateMount) {
		if m == d.stateMount || testenv.NodeMount(m) {
			continue // the state's own, and the node's (views, ready disk images)
		}
		owner := ""
		for id := range states {
			if strings.Contains(m, id) {
				owner = id
			}
		}
		if !running[owner] {
			events, _, _ := d.airlock("events", owner)
			t.Errorf("mount %s belongs to no running sandbox (its sandbox %q is %q); its events:\n%s", m, owner, states[owner], events)
		}
	}
	prefix := "c" + d.cgroup[len(d.cgroup)-4:]
	out, _ := exec.Command("ip", "-o", "link", "show", "type", "veth").Output()
	veths := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], prefix) {
			veths++
		}
	}
	if veths != len(running) {
		t.Errorf("%d host veths for %d running sandboxes:\n%s", veths, len(running), out)
	}
	out, _ = exec.Command("nft", "list", "set", "inet", d.table(), "sandbox_ifs").Output()
	if got := strings.Count(string(out), `"`+prefix); got != len(running) {
		t.Errorf("%d interfaces in the nftables set for %d running sandboxes:\n%s", got, len(running), out)
	}
	if out := d.must("gc", "--dry-run"); !strings.Contains(out, "nothing to remove") {
		t.Errorf("gc --dry-run after recovery: %q; want nothing to remove", out)
	}
}

// checkStore: the database passes SQLite's integrity check and no operation is pending
// or running.
func checkStore(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("store integrity check: %q, %v; want ok", res, err)
	}
	db.Close()
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ops, err := st.ListOperations(background, store.OperationFilter{States: []string{store.OpPending, store.OpRunning}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		t.Errorf("operation %s (%s) is still %s after recovery", op.ID, op.Kind, op.State)
	}
}

func mergeCounts(a, b map[string]int) map[string]int {
	if a == nil {
		a = map[string]int{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}
