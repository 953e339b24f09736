package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// runLabel marks every sandbox of one bench run, so a failed run can be cleaned up.
const runLabel = "airlock-bench"

// createTimes splits one create → first exec.
type createTimes struct {
	total, create, exec time.Duration
	start, answered     time.Time // the create call's start and answer
}

// createExec creates a sandbox and runs argv in it, checking that it succeeded and
// printed want (when want is not empty). The sandbox id is returned even on failure
// once the sandbox exists.
func createExec(ctx context.Context, c *client.Client, req api.CreateSandboxRequest, argv []string, want string) (string, createTimes, error) {
	var t createTimes
	name := req.Name
	start := time.Now()
	resp, err := c.Create(ctx, req)
	t.start, t.answered = start, time.Now()
	t.create = t.answered.Sub(start)
	if err != nil {
		return "", t, fmt.Errorf("create %s: %w", name, err)
	}
	id := resp.Operation.SandboxID
	if resp.Sandbox != nil {
		id = resp.Sandbox.ID
	}
	if resp.Operation.State != "succeeded" || id == "" {
		msg := resp.Operation.State
		if resp.Operation.Error != nil {
			msg = resp.Operation.Error.Message + " (" + resp.Operation.Error.Code + ")"
		}
		return id, t, fmt.Errorf("create %s: %s", name, msg)
	}
	res, err := c.Exec(ctx, id, api.ExecRequest{Argv: argv})
	t.total = time.Since(start)
	t.exec = t.total - t.create
	if err != nil {
		return id, t, fmt.Errorf("exec in %s: %w", name, err)
	}
	if err := checkResult(res, want); err != nil {
		return id, t, fmt.Errorf("exec in %s: %w", name, err)
	}
	return id, t, nil
}

func checkResult(res *api.ExecResult, want string) error {
	if res.State != api.ExecSucceeded || res.ExitCode != 0 {
		return fmt.Errorf("ended %s with code %d: %s%s", res.State, res.ExitCode, res.Error, res.Stderr)
	}
	if want != "" && res.Stdout != want {
		return fmt.Errorf("printed %q, want %q", res.Stdout, want)
	}
	return nil
}

// createSplit divides a create by the daemon's own event times: from the call to the
// sandbox's "created" record, from there to its move to running (the runtime's start:
// user-namespace holder, mounts, runc run, agent ready), and from there to the answer.
func createSplit(ctx context.Context, c *client.Client, id string, t createTimes) (record, start, answer time.Duration, err error) {
	evs, err := c.Events(ctx, id, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	var created, running time.Time
	for _, ev := range evs {
		switch {
		case ev.Type == "created" && created.IsZero():
			created = ev.Time
		case ev.Type == "state" && ev.Data["to"] == api.StateRunning && running.IsZero():
			running = ev.Time
		}
	}
	if created.IsZero() || running.IsZero() {
		return 0, 0, 0, fmt.Errorf("sandbox %s has no created or running event", id)
	}
	// Wall-clock differences: the daemon's times come from the same host clock.
	start0, answered := t.start.Round(0), t.answered.Round(0)
	return created.Sub(start0), running.Sub(created), answered.Sub(running), nil
}

// execTrue times one exec of `true` in a running sandbox.
func execTrue(ctx context.Context, c *client.Client, id string) (time.Duration, error) {
	start := time.Now()
	res, err := c.Exec(ctx, id, api.ExecRequest{Argv: []string{"true"}})
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	return d, checkResult(res, "")
}

// terminate ends a sandbox and checks that the daemon says it did.
func terminate(ctx context.Context, c *client.Client, id string) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Terminate(ctx, id)
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("terminate %s: %w", id, err)
	}
	if resp.Operation.State != "succeeded" {
		msg := resp.Operation.State
		if resp.Operation.Error != nil {
			msg = resp.Operation.Error.Message
		}
		return d, fmt.Errorf("terminate %s: %s", id, msg)
	}
	return d, nil
}

// cleanupRun terminates every sandbox of this run that is not yet terminated.
func cleanupRun(c *client.Client, runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sbs, err := c.List(ctx, client.ListOptions{Labels: map[string]string{runLabel: runID}})
	if err != nil {
		return
	}
	for _, sb := range sbs {
		if sb.State != api.StateTerminated {
			c.Terminate(ctx, sb.ID)
		}
	}
}

// daemonPID is the pid of the process serving the unix socket, from SO_PEERCRED.
func daemonPID(socket string) (int, error) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Pid), nil
}

// procCPU is the CPU time of a process and of the children it has waited for:
// utime, stime, cutime and cstime of /proc/<pid>/stat, in clock ticks of 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it do not.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, s := range f[11:15] { // fields 14 to 17
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// procMiB reads a "Key: N kB" line of /proc/<pid>/<file> (status or smaps_rollup) in MiB.
func procMiB(pid int, file, key string) (float64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), file))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/%s %s: %w", pid, file, key, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("/proc/%d/%s has no %s", pid, file, key)
}

// hostCgroups says where sandbox cgroups live on this host.
type hostCgroups struct {
	v2     bool
	parent string // Airlock's cgroup parent, "airlock" by default
}

func detectHostCgroups(parent string) hostCgroups {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return hostCgroups{v2: err == nil, parent: parent}
}

// parentDirs are the directories of the cgroup parent, one per hierarchy.
func (h hostCgroups) parentDirs() []string {
	if h.v2 {
		return []string{filepath.Join("/sys/fs/cgroup", h.parent)}
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	var out []string
	for _, d := range hier {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, filepath.Join(d, h.parent))
		}
	}
	return out
}

// agentPID finds a sandbox's agent: a process of its cgroup whose command line names
// the agent, else the first one.
func (h hostCgroups) agentPID(id string) (int, error) {
	procs := filepath.Join("/sys/fs/cgroup", h.parent, id, "cgroup.procs")
	if !h.v2 {
		procs = filepath.Join("/sys/fs/cgroup/pids", h.parent, id, "cgroup.procs")
	}
	b, err := os.ReadFile(procs)
	if err != nil {
		return 0, err
	}
	first := 0
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if first == 0 {
			first = pid
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", f, "cmdline"))
		if strings.Contains(string(cmd), "agent") {
			return pid, nil
		}
	}
	if first == 0 {
		return 0, fmt.Errorf("%s lists no process", procs)
	}
	return first, nil
}

// leaks lists what is left of Airlock's sandboxes on the host: runc containers named
// airlock-* in the daemon's runc root, mounts under its sandboxes directory, sandbox
// directories, and cgroups under the parent named after a sandbox of this run (ours).
// Other cgroups under the parent belong to other daemons sharing the default parent;
// they are only counted.
func leaks(ctx context.Context, runc, stateDir string, cg hostCgroups, ours func(string) bool) (out []string, foreign int) {
	out = []string{}
	if ids, err := runcList(ctx, runc, filepath.Join(stateDir, "runc")); err != nil {
		out = append(out, "runc list failed: "+err.Error())
	} else {
		var left []string
		for _, id := range ids {
			if strings.HasPrefix(id, "airlock-") {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			out = append(out, fmt.Sprintf("%d runc containers (%s)", len(left), firstFew(left)))
		}
	}
	if m := mountsUnder(filepath.Join(stateDir, "sandboxes")); len(m) > 0 {
		out = append(out, fmt.Sprintf("%d mounts (%s)", len(m), firstFew(m)))
	}
	var cgs []string
	for _, d := range cg.parentDirs() {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			switch {
			case !e.IsDir():
			case ours(e.Name()):
				cgs = append(cgs, filepath.Join(d, e.Name()))
			default:
				foreign++
			}
		}
	}
	if len(cgs) > 0 {
		out = append(out, fmt.Sprintf("%d cgroups (%s)", len(cgs), firstFew(cgs)))
	}
	if entries, err := os.ReadDir(filepath.Join(stateDir, "sandboxes")); err == nil && len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		out = append(out, fmt.Sprintf("%d sandbox directories (%s)", len(names), firstFew(names)))
	}
	return out, foreign
}

func firstFew(s []string) string {
	sort.Strings(s)
	if len(s) > 3 {
		return strings.Join(s[:3], ", ") + ", ..."
	}
	return strings.Join(s, ", ")
}

// runcList returns the container ids in a runc root.
func runcList(ctx context.Context, runc, root string) ([]string, error) {
	out, err := command(ctx, runc, "--root", root, "list", "--format", "json").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, err
	}
	var list []struct {
		ID string `json:"id"`
	}
	if s := strings.TrimSpace(string(out)); s != "" && s != "null" {
		if err := json.Unmarshal(out, &list); err != nil {
			return nil, fmt.Errorf("runc list: %w", err)
		}
	}
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	return ids, nil
}

// mountsUnder lists the mount points at or below dir in this mount namespace.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"cannot read mountinfo: " + err.Error()}
	}
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescape.Replace(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// concurrencyResult is the outcome of the many-sandboxes test.
type concurrencyResult struct {
	Sandboxes        int      `json:"sandboxes"`
	Parallel         int      `json:"parallel"`
	CreateExecWallMS float64  `json:"create_exec_wall_ms"`
	TerminateWallMS  float64  `json:"terminate_wall_ms"`
	CleanupWallMS    float64  `json:"cleanup_wall_ms"` // until the last background cleanup ended
	Succeeded        int      `json:"succeeded"`
	Failed           int      `json:"failed"`
	Errors           []string `json:"errors,omitempty"`
	Leaks            []string `json:"leaks"`
	Foreign          int      `json:"foreign_cgroups,omitempty"` // under the parent, not this run's
	Latency          *series  `json:"-"`                         // each sandbox's create → exec
	// The parts of Latency (the create's answer, then the first exec), and the floor:
	// an exec in each of the same sandboxes, all at once, once the pool is refilled.
	Parts         []*series `json:"-"`
	AgentRSS      []float64 `json:"-"`
	AgentPss      []float64 `json:"-"`
	DaemonPeakMiB float64   `json:"daemon_rss_all_running_mib"`
}

// manySandboxes creates n sandboxes with at most parallel calls in flight, runs
// `echo ok` in each, reads every agent's memory while all run, terminates them all and
// then looks for anything left on the host.
func (b *bench) manySandboxes(ctx context.Context, c *client.Client, label string, daemon int, cg hostCgroups, stateDir string) concurrencyResult {
	n, parallel, runID := b.o.concurrency, b.o.par, b.runID
	r := concurrencyResult{Sandboxes: n, Parallel: parallel,
		Latency: &series{Name: fmt.Sprintf("d. burst%s: create → exec echo, %d at once", label, n), Unit: "ms"}}
	ids := make([]string, n)
	times := make([]createTimes, n)
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("bench-%s-many-%d", runID, i)
			ids[i], times[i], errs[i] = createExec(ctx, c, b.request(name, ""), []string{"echo", "ok"}, "ok\n")
			b.track(ids[i])
		}()
	}
	wg.Wait()
	r.CreateExecWallMS = ms(time.Since(start))
	for i, t := range times {
		if errs[i] == nil {
			r.Latency.addDuration(t.total)
		}
	}
	for i, id := range ids {
		if errs[i] == nil {
			if pid, err := cg.agentPID(id); err == nil {
				if v, err := procMiB(pid, "status", "VmRSS"); err == nil {
					r.AgentRSS = append(r.AgentRSS, v)
				}
				if v, err := procMiB(pid, "smaps_rollup", "Pss"); err == nil {
					r.AgentPss = append(r.AgentPss, v)
				}
			}
		}
	}
	r.DaemonPeakMiB, _ = procMiB(daemon, "status", "VmRSS")
	r.Parts = b.burstParts(ctx, c, label, ids, times, errs)
	start = time.Now()
	for i := range n {
		if ids[i] == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := terminate(ctx, c, ids[i]); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	r.TerminateWallMS = ms(time.Since(start))
	if b.afterBurst != nil {
		b.afterBurst()
		b.afterBurst = nil
	}
	// Terminate answers once the processes are dead; the rest (mounts, disk, cgroups,
	// network) is a background cleanup. The leak check waits for it, as gc would, but
	// without gc's removal of leftovers, which would hide a leak.
	if err := waitCleanups(ctx, c, 2*time.Minute); err != nil {
		r.Failed++
		r.Errors = append(r.Errors, err.Error())
	}
	r.CleanupWallMS = ms(time.Since(start))
	for _, err := range errs {
		if err != nil {
			r.Failed++
			if len(r.Errors) < 5 {
				r.Errors = append(r.Errors, err.Error())
			}
		}
	}
	r.Succeeded = n - r.Failed
	r.Leaks, r.Foreign = leaks(ctx, b.o.runc, stateDir, cg, b.ours)
	return r
}

// burstParts splits a burst's create → exec into the create's answer and the first
// exec, and measures the floor of the exec part: `echo ok` in each sandbox that
// succeeded, all at once, with no create beside them, after the pool (if any) is full
// again, so that no refill runs meanwhile.
func (b *bench) burstParts(ctx context.Context, c *client.Client, label string, ids []string, times []createTimes, errs []error) []*series {
	n := len(ids)
	create := &series{Name: fmt.Sprintf("d. burst%s: create answered, %d at once", label, n), Unit: "ms"}
	exec := &series{Name: fmt.Sprintf("d. burst%s: its first exec", label), Unit: "ms"}
	floor := &series{Name: fmt.Sprintf("d. burst%s floor: exec echo in the %d running, at once", label, n), Unit: "ms"}
	for i, t := range times {
		if errs[i] == nil {
			create.addDuration(t.create)
			exec.addDuration(t.exec)
		}
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		pools, err := c.Pools(ctx)
		full := err == nil
		for _, p := range pools {
			full = full && p.Ready >= p.Size
		}
		if full {
			break
		}
	}
	took := make([]time.Duration, n)
	ferrs := make([]error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		if errs[i] != nil {
			continue
		}
		wg.Go(func() {
			t0 := time.Now()
			res, err := c.Exec(ctx, id, api.ExecRequest{Argv: []string{"echo", "ok"}})
			took[i] = time.Since(t0)
			if err == nil {
				err = checkResult(res, "ok\n")
			}
			ferrs[i] = err
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] == nil {
			if ferrs[i] != nil {
				floor.fail(ferrs[i])
			} else {
				floor.addDuration(took[i])
			}
		}
	}
	return []*series{create, exec, floor}
}

// terminateSettled is terminate, timed alone, followed by an untimed wait for the
// background cleanup it leaves: the next contender's CPU and time are then its own,
// not shared with the cleanup of the sandbox before it.
func terminateSettled(ctx context.Context, c *client.Client, id string) (time.Duration, error) {
	d, err := terminate(ctx, c, id)
	if err != nil {
		return d, err
	}
	return d, waitCleanups(ctx, c, time.Minute)
}

// waitCleanups waits until the node's health line "cleanups" reports none pending.
func waitCleanups(ctx context.Context, c *client.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		pending := ""
		for _, ch := range st.Checks {
			if ch.Name == "cleanups" {
				pending = ch.Detail
			}
		}
		if pending == "" || strings.HasPrefix(pending, "0 ") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("background cleanups still pending after %s: %s", limit, pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fillPool keeps a warm pool of n members of the node's default image, limits and
// network (what a plain create claims from), waits until all n are ready and returns
// the call that removes it again.
func (b *bench) fillPool(ctx context.Context, c *client.Client, n int) (func(), error) {
	name := "bench-burst-" + b.runID
	if _, err := c.SetPool(ctx, name, api.PoolRequest{Size: n}); err != nil {
		return nil, fmt.Errorf("set up the burst's warm pool: %w", err)
	}
	stop := sync.OnceFunc(func() {
		if err := c.DeletePool(context.WithoutCancel(ctx), name); err != nil {
			b.logf("warm pool %s not removed: %v", name, err)
		}
	})
	start := time.Now()
	deadline := start.Add(time.Duration(n)*time.Second + time.Minute)
	for {
		pools, err := c.Pools(ctx)
		if err != nil {
			stop()
			return nil, err
		}
		ready := -1
		for _, p := range pools {
			if p.Name == name {
				ready = p.Ready
			}
		}
		if ready >= n {
			b.logf("warm pool %s: %d ready in %.1f s", name, ready, time.Since(start).Seconds())
			b.afterBurst = stop // its refills are not the burst's leaks
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("warm pool %s: %d of %d ready after %s", name, max(ready, 0), n, time.Since(start).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
