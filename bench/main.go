// Command bench times Airlock against its peers in one run and prints a table: create →
// first exec of `true` (Airlock, a bare `runc run` of the same root filesystem and
// config, `podman run --rm`), the exec round trip in a warm sandbox (Airlock's agent
// against `runc exec` into the same container), the daemon's and the agent's memory, and
// many sandboxes created at once with a check that nothing is left afterwards.
//
// It needs root, runc and (unless -skip-podman) podman, and a running daemon it may
// fill with sandboxes: start a private one, as bench/run.sh does. It never asserts a
// time unless -strict is given, which makes a missed target the exit status.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var me *missedError
	switch {
	case err == nil:
	case errors.As(err, &me):
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
}

// missedError is the result of -strict when a target was missed.
type missedError struct{ names []string }

func (e *missedError) Error() string { return "targets missed: " + strings.Join(e.names, "; ") }

// options are the command-line flags.
type options struct {
	n, execN, warmup   int
	concurrency, par   int
	burstPool          bool
	socket, stateDir   string
	runc, cgroup       string
	jsonPath           string
	daemonPID          int
	flood              int
	skipPodman, strict bool
	terminate          bool
	// before is a second daemon (the code before a change) timed beside the first,
	// interleaved: its socket, state directory and cgroup parent.
	beforeSocket, beforeState, beforeCgroup string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 30, "iterations of each create → first exec measurement")
	fs.IntVar(&o.execN, "exec-n", 300, "iterations of each warm exec measurement")
	fs.IntVar(&o.warmup, "warmup", 3, "untimed iterations before each measurement")
	fs.IntVar(&o.concurrency, "concurrency", 100, "sandboxes in the concurrency test (0 skips it)")
	fs.BoolVar(&o.burstPool, "burst-pool", false, "serve the concurrency test from a warm pool of -concurrency members (the default image, limits and network), filled before it starts")
	fs.IntVar(&o.par, "parallel", 0, "at most this many calls in flight in the concurrency test (0: all at once)")
	fs.StringVar(&o.socket, "socket", "/run/airlock-bench/api.sock", "unix socket of the daemon to benchmark (a private one: it gets filled with sandboxes)")
	fs.StringVar(&o.stateDir, "state-dir", "", "the daemon's state directory (default: what the daemon reports)")
	fs.StringVar(&o.runc, "runc", "runc", "runc binary")
	fs.StringVar(&o.cgroup, "cgroup-parent", "airlock", "the daemon's cgroup parent")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file ('-': to standard output, instead of the table)")
	fs.IntVar(&o.daemonPID, "daemon-pid", 0, "the daemon's pid (default: the peer of the socket)")
	fs.BoolVar(&o.skipPodman, "skip-podman", false, "do not measure podman")
	fs.IntVar(&o.flood, "flood", 0, "instead of the table: flood the daemon from one sandbox for this many seconds and measure a second one (DNS, proxy connections and output at once)")
	fs.BoolVar(&o.terminate, "terminate", false, "instead of the table: time terminate's answer against runc kill + delete, and `airlock run -- true` against `runc run`, -n rounds (bench/terminate.go)")
	fs.BoolVar(&o.strict, "strict", false, "exit 1 when a target is missed")
	fs.StringVar(&o.beforeSocket, "before-socket", "", "unix socket of a second daemon (the code before a change) to time beside the first: its creates take turns with the first's, and its burst runs after the first's")
	fs.StringVar(&o.beforeState, "before-state-dir", "", "the second daemon's state directory (default: what it reports)")
	fs.StringVar(&o.beforeCgroup, "before-cgroup-parent", "airlock-before", "the second daemon's cgroup parent")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.n < 1 || o.execN < 1 || o.warmup < 0 || o.concurrency < 0 || o.par < 0 {
		return o, errors.New("-n and -exec-n must be positive; -warmup, -concurrency and -parallel not negative")
	}
	if o.par == 0 {
		o.par = max(o.concurrency, 1)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the benchmark needs root (it runs runc and reads the daemon's runc root)")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", a...) }
	b := &bench{o: o, logf: logf, runID: strconv.FormatInt(time.Now().UnixNano(), 36)}
	defer b.close()
	if o.flood > 0 {
		return b.runFlood(ctx, stdout)
	}
	if o.terminate {
		return b.runTerminate(ctx, stdout)
	}
	rep, err := b.measure(ctx)
	if err != nil {
		return err
	}
	if o.jsonPath != "-" {
		rep.writeTable(stdout)
	}
	if o.jsonPath != "" {
		w := stdout
		if o.jsonPath != "-" {
			f, err := os.Create(o.jsonPath)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		if err := rep.writeJSON(w); err != nil {
			return err
		}
	}
	if m := missed(rep.Targets); o.strict && len(m) > 0 {
		return &missedError{m}
	}
	return nil
}

// bench holds one run's state and what it must undo.
type bench struct {
	// afterBurst, when set, ends what the burst was served from before its leak check.
	afterBurst func()
	o          options
	logf       func(string, ...any)
	runID      string
	pid        int // the daemon's
	c          *client.Client
	before     *daemonRef // the second daemon of -before-socket, or nil
	work       string     // the bench's own directory: root filesystems, bundles, runc root
	podman     bool       // the podman image was imported
	runsc      bool       // the daemon runs gVisor runsc too: time it beside runc

	mu  sync.Mutex
	ids map[string]bool // every sandbox this run made
}

// request is a create of a sandbox of this run: labelled, with the daemon's default
// egress policy unless network names a mode.
func (b *bench) request(name, network string) api.CreateSandboxRequest {
	req := api.CreateSandboxRequest{Name: name, Labels: map[string]string{runLabel: b.runID}}
	if strings.HasSuffix(name, "-runsc") || strings.Contains(name, "-runsc-") {
		req.Runtime = "runsc"
	}
	if network != "" {
		req.Network = &api.NetworkPolicy{Mode: network}
	}
	return req
}

// track records a sandbox of this run, for the leak check.
func (b *bench) track(id string) {
	if id == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ids == nil {
		b.ids = map[string]bool{}
	}
	b.ids[id] = true
}

func (b *bench) ours(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ids[id]
}

func (b *bench) close() {
	if b.c != nil {
		cleanupRun(b.c, b.runID)
	}
	if b.before != nil {
		cleanupRun(b.before.c, b.runID)
	}
	if b.podman {
		removeImage()
	}
	if b.work != "" {
		if ids, err := runcList(context.Background(), b.o.runc, filepath.Join(b.work, "runc")); err == nil {
			for _, id := range ids {
				runcDelete(b.o.runc, filepath.Join(b.work, "runc"), id)
			}
		}
		os.RemoveAll(b.work)
	}
	for _, d := range (hostCgroups{v2: detectHostCgroups("").v2, parent: benchCgroup}).parentDirs() {
		os.Remove(d)
	}
}

// benchCgroup is the cgroup parent of the bare runc containers.
const benchCgroup = "airlock-bench-runc"

// prepare makes the bench's work directory, a warm sandbox (returned) whose bundle is
// the template of the bare runc bundles, and those bundles.
func (b *bench) prepare(ctx context.Context, stateDir string) (warmID string, p *peers, err error) {
	skeleton, err := hostSkeleton(ctx, b.c, stateDir)
	if err != nil {
		return "", nil, err
	}
	if b.work, err = os.MkdirTemp("", "airlock-bench-"); err != nil {
		return "", nil, err
	}
	if err := os.Chmod(b.work, 0o711); err != nil { // the containers' root walks through it
		return "", nil, err
	}
	b.logf("creating the warm sandbox")
	warmID, _, err = createExec(ctx, b.c, b.request("bench-"+b.runID+"-warm", ""), []string{"true"}, "")
	b.track(warmID)
	if err != nil {
		return warmID, nil, err
	}
	tmpl, err := readBundleConfig(filepath.Join(stateDir, "sandboxes", warmID, "bundle", "config.json"))
	if err != nil {
		return warmID, nil, err
	}
	p, err = b.preparePeers(ctx, skeleton, stateDir, tmpl)
	return warmID, p, err
}

// measure runs every measurement and assembles the report.
func (b *bench) measure(ctx context.Context) (*report, error) {
	o := b.o
	var err error
	if b.c, err = client.New(client.Options{Socket: o.socket}); err != nil {
		return nil, err
	}
	st, err := b.c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("no daemon at %s (start one: bash bench/run.sh does): %w", o.socket, err)
	}
	stateDir := o.stateDir
	if stateDir == "" {
		stateDir = st.StateDir
	}
	pid := o.daemonPID
	if pid == 0 {
		if pid, err = daemonPID(o.socket); err != nil {
			return nil, fmt.Errorf("find the daemon's pid: %w", err)
		}
	}
	b.pid = pid
	if o.beforeSocket != "" {
		if b.before, err = connectBefore(ctx, o); err != nil {
			return nil, err
		}
	}
	b.runsc = slices.Contains(st.Runtimes, "runsc")
	cg := detectHostCgroups(o.cgroup)
	rep := &report{Date: time.Now().UTC(), Environment: environment(st, stateDir, pid, o)}
	if st.Sandboxes > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the daemon had %d live sandboxes at the start: the leak check counts them too", st.Sandboxes))
	}

	// c. daemon memory before any sandbox.
	idleStart := &series{Name: "c. daemon VmRSS, idle at start", Unit: "MiB"}
	if v, err := procMiB(pid, "status", "VmRSS"); err == nil {
		idleStart.Values = []float64{v}
	} else {
		idleStart.fail(err)
	}

	// A warm sandbox: the template of the runc bundles, the target of the exec test and
	// the agent whose memory is read.
	warmID, peers, err := b.prepare(ctx, stateDir)
	if err != nil {
		return nil, err
	}

	a := b.createPhase(ctx, peers)
	ex, note := b.execPhase(ctx, warmID, stateDir, peers)
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	agentWarm := &series{Name: fmt.Sprintf("c. agent VmRSS, warm (%d execs)", 1+o.execN+o.warmup), Unit: "MiB"}
	if apid, err := cg.agentPID(warmID); err != nil {
		agentWarm.fail(err)
	} else if v, err := procMiB(apid, "status", "VmRSS"); err != nil {
		agentWarm.fail(err)
	} else {
		agentWarm.Values = []float64{v}
		if anon, err := procMiB(apid, "status", "RssAnon"); err == nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("warm agent after %d execs: VmRSS %.1f MiB of which RssAnon %.1f MiB (the rest is the shared, file-backed airlock binary)", 1+o.execN+o.warmup, v, anon))
		}
	}
	// The agent gives back what a burst grew its heap by once idle for a second.
	agentIdle := &series{Name: "c. agent VmRSS, warm then idle 2 s", Unit: "MiB"}
	time.Sleep(2 * time.Second)
	if apid, err := cg.agentPID(warmID); err != nil {
		agentIdle.fail(err)
	} else if v, err := procMiB(apid, "status", "VmRSS"); err != nil {
		agentIdle.fail(err)
	} else {
		agentIdle.Values = []float64{v}
		if anon, err := procMiB(apid, "status", "RssAnon"); err == nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("warm agent idle 2 s later: VmRSS %.1f MiB of which RssAnon %.1f MiB", v, anon))
		}
	}
	if _, err := terminate(ctx, b.c, warmID); err != nil {
		return nil, err
	}

	var conc concurrencyResult
	if o.concurrency > 0 {
		label := ""
		if o.burstPool {
			label = " from a pool"
			stop, err := b.fillPool(ctx, b.c, o.concurrency)
			if err != nil {
				return nil, err
			}
			defer stop()
		}
		b.logf("creating %d sandboxes at once (at most %d calls in flight)", o.concurrency, o.par)
		conc = b.manySandboxes(ctx, b.c, label, pid, cg, stateDir)
		if b.before != nil {
			b.logf("the same on the second daemon")
			blabel := " (before)"
			if o.burstPool {
				if stop, err := b.fillPool(ctx, b.before.c, o.concurrency); err != nil {
					rep.Notes = append(rep.Notes, "second daemon's burst is cold: "+err.Error())
				} else {
					blabel = " (before) from a pool"
					defer stop()
				}
			}
			bc := b.manySandboxes(ctx, b.before.c, blabel, b.before.pid, b.before.cg, b.before.stateDir)
			a.beforeBurst = bc.Latency
			a.burstParts = append(a.burstParts, bc.Parts...)
			if bc.Failed > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("second daemon's burst: %d failed, first: %s", bc.Failed, strings.Join(bc.Errors[:min(1, len(bc.Errors))], "")))
			}
		}
		if conc.Foreign > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d cgroups under %q belong to no sandbox of this run (another daemon shares the parent); not counted as leaks", conc.Foreign, o.cgroup))
		}
	}
	rep.Concurrency = conc
	idleEnd := &series{Name: "c. daemon VmRSS, idle at end", Unit: "MiB"}
	if v, err := procMiB(pid, "status", "VmRSS"); err == nil {
		idleEnd.Values = []float64{v}
	} else {
		idleEnd.fail(err)
	}
	agentRSS := &series{Name: fmt.Sprintf("c. agent VmRSS, %d sandboxes", len(conc.AgentRSS)), Unit: "MiB", Values: conc.AgentRSS}
	agentPss := &series{Name: fmt.Sprintf("c. agent Pss, %d sandboxes", len(conc.AgentPss)), Unit: "MiB", Values: conc.AgentPss}
	busy := &series{Name: fmt.Sprintf("c. daemon VmRSS, %d sandboxes live", conc.Succeeded), Unit: "MiB"}
	if conc.DaemonPeakMiB > 0 {
		busy.Values = []float64{conc.DaemonPeakMiB}
	}

	for _, s := range append([]*series{a.airlock, a.create, a.toRecord, a.runtimeStart, a.toAnswer, a.firstExec, a.terminate, a.airlockNone, a.runcUsr, a.runcMin, a.runcNoSeccomp, a.deleteForce, a.killDelete, a.podmanNone, a.podmanDefault, a.runsc, a.cpuAirlock, a.cpuRunc, a.before, a.cpuBefore,
		ex.airlock, ex.runc, ex.get, ex.runsc, idleStart, busy, idleEnd, agentWarm, agentIdle, agentRSS, agentPss, conc.Latency, a.beforeBurst}, append(conc.Parts, a.burstParts...)...) {
		if s != nil && (len(s.Values) > 0 || s.Errors > 0) {
			rep.Series = append(rep.Series, s.summary())
		}
	}
	rep.Ratios, rep.Targets = judge(a, ex, idleStart, idleEnd, agentWarm, agentRSS, agentPss, conc, o)
	if ids, err := runcList(ctx, o.runc, filepath.Join(b.work, "runc")); err == nil && len(ids) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("bare runc containers left in the bench's runc root: %s", firstFew(ids)))
	}
	return rep, nil
}

// hostSkeleton is the directory of the host image's skeleton layer.
func hostSkeleton(ctx context.Context, c *client.Client, stateDir string) (string, error) {
	imgs, err := c.Images(ctx)
	if err != nil {
		return "", err
	}
	for _, img := range imgs {
		if img.Name == "host" && img.Builtin {
			hex, ok := strings.CutPrefix(img.Digest, "sha256:")
			if !ok {
				return "", fmt.Errorf("host image digest %q is not sha256", img.Digest)
			}
			dir := filepath.Join(stateDir, "images", "host", hex)
			if _, err := os.Stat(dir); err != nil {
				return "", fmt.Errorf("host image skeleton: %w", err)
			}
			return dir, nil
		}
	}
	return "", errors.New("the daemon has no built-in host image")
}

func readBundleConfig(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the warm sandbox's bundle: %w", err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func environment(st *api.Status, stateDir string, pid int, o options) map[string]string {
	env := map[string]string{
		"cpus":      strconv.Itoa(runtime.NumCPU()),
		"go":        runtime.Version(),
		"airlock":   st.Version,
		"runc":      toolVersion(o.runc),
		"state dir": stateDir,
		"daemon":    fmt.Sprintf("pid %d on %s", pid, o.socket),
		"cgroups":   "v1",
	}
	if detectHostCgroups("").v2 {
		env["cgroups"] = "v2"
	}
	if !o.skipPodman {
		env["podman"] = toolVersion("podman")
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			env["load at start"] = strings.Join(f[:3], " ") + " (1, 5, 15 min)"
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		env["kernel"] = utsString(u.Release[:])
	}
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				env["os"] = strings.Trim(v, `"`)
			}
		}
	}
	return env
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// daemonRef is a daemon the bench times.
type daemonRef struct {
	c        *client.Client
	pid      int
	stateDir string
	cg       hostCgroups
}

// connectBefore reaches the daemon of -before-socket.
func connectBefore(ctx context.Context, o options) (*daemonRef, error) {
	c, err := client.New(client.Options{Socket: o.beforeSocket})
	if err != nil {
		return nil, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("no daemon at %s: %w", o.beforeSocket, err)
	}
	pid, err := daemonPID(o.beforeSocket)
	if err != nil {
		return nil, fmt.Errorf("find the second daemon's pid: %w", err)
	}
	d := &daemonRef{c: c, pid: pid, stateDir: o.beforeState, cg: detectHostCgroups(o.beforeCgroup)}
	if d.stateDir == "" {
		d.stateDir = st.StateDir
	}
	return d, nil
}
