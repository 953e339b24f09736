package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/airlockhq/airlock/client"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// peers are the contenders of the create test besides Airlock; a nil one is not measured.
type peers struct {
	runcUsr, runcMin *runcPeer
	runcNoSeccomp    *runcPeer // informative: runcUsr without the seccomp profile
	runcSleep        *runcPeer // informative: a long-running container, to time stopping one
	podman           bool
	podmanLimits     []string
}

// preparePeers builds the bare runc bundles and, unless skipped, the podman image.
//
//	usr: a copy of the skeleton plus the read-only /usr bind mount, Airlock's own config
//	     (and the same without its seccomp profile, to show what compiling it costs)
//	min: a copy of the skeleton plus /usr/bin/true and the libraries it loads; the same
//	     tree is imported as the podman image, so runc and podman run the same files
func (b *bench) preparePeers(ctx context.Context, skeleton, stateDir string, tmpl map[string]any) (*peers, error) {
	runcRoot := filepath.Join(b.work, "runc")
	p := &peers{}
	usr := filepath.Join(b.work, "rootfs-usr")
	if err := copyTree(skeleton, usr); err != nil {
		return nil, fmt.Errorf("copy skeleton: %w", err)
	}
	if err := shiftOwners(usr, benchUIDBase); err != nil {
		return nil, err
	}
	bundle := filepath.Join(b.work, "bundle-usr")
	if err := newBundle(bundle, tmpl, bundleOpts{stateDir: stateDir, rootfs: usr, cgroup: "/" + benchCgroup + "/usr", keepImageMounts: true}); err != nil {
		return nil, err
	}
	p.runcUsr = &runcPeer{runc: b.o.runc, root: runcRoot, bundle: bundle, prefix: "bench-" + b.runID + "-usr-"}
	bundle = filepath.Join(b.work, "bundle-noseccomp")
	if err := newBundle(bundle, tmpl, bundleOpts{stateDir: stateDir, rootfs: usr, cgroup: "/" + benchCgroup + "/noseccomp", keepImageMounts: true, noSeccomp: true}); err != nil {
		return nil, err
	}
	p.runcNoSeccomp = &runcPeer{runc: b.o.runc, root: runcRoot, bundle: bundle, prefix: "bench-" + b.runID + "-nosec-"}
	bundle = filepath.Join(b.work, "bundle-sleep")
	if err := newBundle(bundle, tmpl, bundleOpts{stateDir: stateDir, rootfs: usr, cgroup: "/" + benchCgroup + "/sleep", keepImageMounts: true, args: []any{"sleep", "1000"}}); err != nil {
		return nil, err
	}
	p.runcSleep = &runcPeer{runc: b.o.runc, root: runcRoot, bundle: bundle, prefix: "bench-" + b.runID + "-sleep-"}

	minimal := filepath.Join(b.work, "rootfs-min")
	if err := copyTree(skeleton, minimal); err != nil {
		return nil, fmt.Errorf("copy skeleton: %w", err)
	}
	files, err := lddPaths("/usr/bin/true")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := addHostFile(minimal, f); err != nil {
			return nil, fmt.Errorf("minimal root filesystem: %w", err)
		}
	}
	if !b.o.skipPodman {
		b.logf("importing the minimal root filesystem as podman image %s", podmanImage)
		removeImage()
		if err := importImage(ctx, minimal); err != nil {
			return nil, err
		}
		b.podman, p.podman = true, true
		p.podmanLimits = podmanLimits()
	}
	if err := shiftOwners(minimal, benchUIDBase); err != nil {
		return nil, err
	}
	bundle = filepath.Join(b.work, "bundle-min")
	if err := newBundle(bundle, tmpl, bundleOpts{stateDir: stateDir, rootfs: minimal, cgroup: "/" + benchCgroup + "/min"}); err != nil {
		return nil, err
	}
	p.runcMin = &runcPeer{runc: b.o.runc, root: runcRoot, bundle: bundle, prefix: "bench-" + b.runID + "-min-"}
	return p, nil
}

// createResults are the series of the create test.
type createResults struct {
	airlock, create, firstExec, terminate *series // the daemon's default egress network
	airlockNone                           *series // network mode none: loopback only
	toRecord, runtimeStart, toAnswer      *series // the create split by the daemon's events
	runcUsr, runcMin, runcNoSeccomp       *series
	deleteForce, killDelete               *series
	podmanNone, podmanDefault             *series
	runsc                                 *series   // the daemon's gVisor runtime, when it has one
	cpuAirlock, cpuRunc                   *series   // CPU time of one create → exec, and of one runc run
	before, cpuBefore, beforeBurst        *series   // the second daemon's (-before-socket)
	burstParts                            []*series // the second daemon's burst split (manySandboxes)
}

// contender is one thing timed per round; it stops being run after maxErrors failures.
type contender struct {
	s   *series
	run func(ctx context.Context, round int) (time.Duration, error)
}

const maxErrors = 3

// createPhase times create → first exec of `true`: the contenders take turns, one
// iteration each per round, so drift in the machine's load touches all of them alike.
func (b *bench) createPhase(ctx context.Context, p *peers) createResults {
	r := createResults{
		airlock:       &series{Name: "a. airlock create → exec true (default network)", Unit: "ms"},
		airlockNone:   &series{Name: "a. airlock create → exec true (network none)", Unit: "ms"},
		create:        &series{Name: "a.   of which create (API answer)", Unit: "ms"},
		firstExec:     &series{Name: "a.   of which first exec", Unit: "ms"},
		terminate:     &series{Name: "a.   terminate (not in the total)", Unit: "ms"},
		toRecord:      &series{Name: "a.   create: call → record stored", Unit: "ms"},
		runtimeStart:  &series{Name: "a.   create: network + runc + agent ready", Unit: "ms"},
		toAnswer:      &series{Name: "a.   create: running → answer", Unit: "ms"},
		runcUsr:       &series{Name: "a. runc run (skeleton + /usr bind)", Unit: "ms"},
		runcMin:       &series{Name: "a. runc run (minimal rootfs)", Unit: "ms"},
		runcNoSeccomp: &series{Name: "a. runc run (skeleton + /usr, no seccomp)", Unit: "ms"},
		deleteForce:   &series{Name: "a. runc delete --force (running container)", Unit: "ms"},
		killDelete:    &series{Name: "a. runc kill KILL, wait, runc delete", Unit: "ms"},
		cpuAirlock:    &series{Name: "a. CPU: airlock create → exec (daemon + its children)", Unit: "ms"},
		cpuRunc:       &series{Name: "a. CPU: runc run (skeleton + /usr; runc + container)", Unit: "ms"},
	}
	cs := []contender{
		{r.airlock, func(ctx context.Context, round int) (time.Duration, error) {
			name := fmt.Sprintf("bench-%s-create-%d", b.runID, round+b.o.warmup)
			id, t, err := b.timedCreate(ctx, b.c, b.pid, name, round, r.cpuAirlock)
			if err == nil && round >= 0 {
				if rec, st, ans, serr := createSplit(ctx, b.c, id, t); serr != nil {
					r.runtimeStart.fail(serr)
				} else {
					r.toRecord.addDuration(rec)
					r.runtimeStart.addDuration(st)
					r.toAnswer.addDuration(ans)
				}
			}
			if id != "" {
				d, terr := terminateSettled(ctx, b.c, id)
				if round >= 0 && terr == nil && err == nil {
					r.terminate.addDuration(d)
				}
				if err == nil {
					err = terr
				}
			}
			if err == nil && round >= 0 {
				r.create.addDuration(t.create)
				r.firstExec.addDuration(t.exec)
			}
			return t.total, err
		}},
		{r.airlockNone, func(ctx context.Context, round int) (time.Duration, error) {
			name := fmt.Sprintf("bench-%s-none-%d", b.runID, round+b.o.warmup)
			id, t, err := createExec(ctx, b.c, b.request(name, "none"), []string{"true"}, "")
			b.track(id)
			if id != "" {
				if _, terr := terminateSettled(ctx, b.c, id); err == nil {
					err = terr
				}
			}
			return t.total, err
		}},
		{r.runcUsr, func(ctx context.Context, round int) (time.Duration, error) {
			d, err := p.runcUsr.run(ctx)
			if err == nil && round >= 0 {
				r.cpuRunc.addDuration(p.runcUsr.lastCPU)
			}
			return d, err
		}},
		{r.runcMin, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcMin.run(ctx) }},
		{r.runcNoSeccomp, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcNoSeccomp.run(ctx) }},
		{r.deleteForce, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcSleep.deleteForce(ctx) }},
		{r.killDelete, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcSleep.killWaitDelete(ctx) }},
	}
	if b.before != nil {
		r.before = &series{Name: "a. before: airlock create → exec true (default network)", Unit: "ms"}
		r.cpuBefore = &series{Name: "a. before: CPU: airlock create → exec (daemon + its children)", Unit: "ms"}
		cs = append(cs, contender{r.before, func(ctx context.Context, round int) (time.Duration, error) {
			name := fmt.Sprintf("bench-%s-before-%d", b.runID, round+b.o.warmup)
			id, t, err := b.timedCreate(ctx, b.before.c, b.before.pid, name, round, r.cpuBefore)
			if id != "" {
				if _, terr := terminate(ctx, b.before.c, id); err == nil {
					err = terr
				}
			}
			return t.total, err
		}})
	}
	if b.runsc {
		r.runsc = &series{Name: "a. airlock create → exec true (runsc, default network)", Unit: "ms"}
		cs = append(cs, contender{r.runsc, func(ctx context.Context, round int) (time.Duration, error) {
			name := fmt.Sprintf("bench-%s-runsc-%d", b.runID, round+b.o.warmup)
			id, t, err := createExec(ctx, b.c, b.request(name, ""), []string{"true"}, "")
			b.track(id)
			if id != "" {
				if _, terr := terminateSettled(ctx, b.c, id); err == nil {
					err = terr
				}
			}
			return t.total, err
		}})
	}
	if p.podman {
		r.podmanNone = &series{Name: "a. podman run --rm --network=none", Unit: "ms"}
		r.podmanDefault = &series{Name: "a. podman run --rm (default network)", Unit: "ms"}
		none := append([]string{"--network=none"}, p.podmanLimits...)
		cs = append(cs,
			contender{r.podmanNone, func(ctx context.Context, _ int) (time.Duration, error) { return podmanRun(ctx, none) }},
			contender{r.podmanDefault, func(ctx context.Context, _ int) (time.Duration, error) { return podmanRun(ctx, p.podmanLimits) }},
		)
	}
	b.logf("create → first exec: %d rounds (+%d warm-up) of %d contenders", b.o.n, b.o.warmup, len(cs))
	b.rounds(ctx, cs, b.o.n)
	return r
}

// timedCreate is createExec of `true` on the daemon of c and pid, adding the CPU time
// the daemon and its children spent on it to cpu (outside the warm-up).
func (b *bench) timedCreate(ctx context.Context, c *client.Client, pid int, name string, round int, cpu *series) (string, createTimes, error) {
	cpu0, cerr := procCPU(pid)
	id, t, err := createExec(ctx, c, b.request(name, ""), []string{"true"}, "")
	b.track(id)
	if cpu1, cerr1 := procCPU(pid); err == nil && round >= 0 {
		if cerr = errors.Join(cerr, cerr1); cerr != nil {
			cpu.fail(cerr)
		} else {
			cpu.addDuration(cpu1 - cpu0)
		}
	}
	return id, t, err
}

// rounds runs every contender once per round, warm-up rounds (negative) untimed.
func (b *bench) rounds(ctx context.Context, cs []contender, n int) {
	for round := -b.o.warmup; round < n; round++ {
		if ctx.Err() != nil {
			return
		}
		for _, c := range cs {
			if c.s.Errors >= maxErrors {
				continue
			}
			d, err := c.run(ctx, round)
			switch {
			case err != nil:
				c.s.fail(err)
				if c.s.Errors == maxErrors {
					b.logf("%s: giving up after %d errors; first: %s", c.s.Name, maxErrors, c.s.Error)
				}
			case round >= 0:
				c.s.addDuration(d)
			}
		}
	}
}

// execResults are the series of the warm exec test.
type execResults struct {
	airlock, runc, get *series
	runsc              *series // a warm sandbox of the daemon's gVisor runtime
}

// execPhase times exec round trips into the warm sandbox: Airlock's API and agent
// against `runc exec` into the very same runc container, and a plain API read as the
// floor of any call. Where runc cannot enter the sandbox's container (runc 1.1 joins
// the user namespace first, and then may not join a network namespace the node made),
// runc execs into a bare runc container of the same config instead, and note says so.
func (b *bench) execPhase(ctx context.Context, id, stateDir string, p *peers) (r execResults, note string) {
	r = execResults{
		airlock: &series{Name: "b. airlock exec true (warm)", Unit: "ms"},
		runc:    &series{Name: "b. runc exec true (same container)", Unit: "ms"},
		get:     &series{Name: "b. airlock GET sandbox (API floor)", Unit: "ms"},
	}
	runcRoot, container := filepath.Join(stateDir, "runc"), "airlock-"+id
	if _, err := runcExec(ctx, b.o.runc, runcRoot, container); err != nil {
		cid, fd, serr := p.runcSleep.start(ctx)
		if serr != nil {
			r.runc.fail(fmt.Errorf("%w; and no bare container either: %w", err, serr))
		} else {
			defer runcDelete(b.o.runc, p.runcSleep.root, cid)
			syscall.Close(fd)
			runcRoot, container = p.runcSleep.root, cid
			r.runc.Name = "b. runc exec true (bare runc container)"
			note = fmt.Sprintf("runc exec cannot enter the sandbox's own container (%s); the runc exec series runs in a bare runc container of the same config instead", firstLine(err.Error()))
			b.logf("%s", note)
		}
	}
	cs := []contender{
		{r.airlock, func(ctx context.Context, _ int) (time.Duration, error) { return execTrue(ctx, b.c, id) }},
		{r.runc, func(ctx context.Context, _ int) (time.Duration, error) {
			return runcExec(ctx, b.o.runc, runcRoot, container)
		}},
		{r.get, func(ctx context.Context, _ int) (time.Duration, error) {
			start := time.Now()
			_, err := b.c.Get(ctx, id)
			return time.Since(start), err
		}},
	}
	if b.runsc {
		r.runsc = &series{Name: "b. airlock exec true (warm, runsc)", Unit: "ms"}
		gid, _, err := createExec(ctx, b.c, b.request("bench-"+b.runID+"-warm-runsc", ""), []string{"true"}, "")
		b.track(gid)
		if err != nil {
			r.runsc.fail(err)
		} else {
			defer terminate(context.WithoutCancel(ctx), b.c, gid)
			cs = append(cs, contender{r.runsc, func(ctx context.Context, _ int) (time.Duration, error) { return execTrue(ctx, b.c, gid) }})
		}
	}
	b.logf("warm exec: %d rounds (+%d warm-up)", b.o.execN, b.o.warmup)
	b.rounds(ctx, cs, b.o.execN)
	return r, note
}

// firstLine is the runc message of an error: its "msg=" text when there is one.
func firstLine(s string) string {
	if _, msg, ok := strings.Cut(s, `msg="`); ok {
		s, _, _ = strings.Cut(msg, `"`)
	}
	s, _, _ = strings.Cut(s, "\n")
	return s
}
