package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock/client"
)

// runTerminate is -terminate: in rounds, so that drift in the machine's load touches
// every contender alike, it times
//
//   - terminate's answer for a running sandbox (create and first exec untimed), against
//     `runc kill KILL` + wait + `runc delete` of a running bare container;
//   - `airlock run -- true` (the CLI process: create, exec, terminate) against
//     `runc run` of `true` in the minimal root filesystem and in the sandbox's own
//     (skeleton + /usr), which is what run runs in.
//
// The CLI is the one beside the daemon's binary (cliBinary). With -before-socket, the second
// daemon's terminate and `airlock run` (with its own binary) take turns with the first's.
// Terminate's cleanup runs in the daemon's background and is not part of either answer;
// the table says how many were still pending at the end and how long the daemon took to
// finish them.
func (b *bench) runTerminate(ctx context.Context, stdout io.Writer) error {
	var err error
	if b.c, err = client.New(client.Options{Socket: b.o.socket}); err != nil {
		return err
	}
	st, err := b.c.Status(ctx)
	if err != nil {
		return fmt.Errorf("no daemon at %s (start one: bash bench/run.sh does): %w", b.o.socket, err)
	}
	stateDir := b.o.stateDir
	if stateDir == "" {
		stateDir = st.StateDir
	}
	pid := b.o.daemonPID
	if pid == 0 {
		if pid, err = daemonPID(b.o.socket); err != nil {
			return fmt.Errorf("find the daemon's pid: %w", err)
		}
	}
	bin, err := cliBinary(pid)
	if err != nil {
		return err
	}
	if b.o.beforeSocket != "" {
		if b.before, err = connectBefore(ctx, b.o); err != nil {
			return err
		}
	}
	b.o.skipPodman = true // not a contender here
	warmID, p, err := b.prepare(ctx, stateDir)
	if err != nil {
		return err
	}
	if _, err := terminate(ctx, b.c, warmID); err != nil {
		return err
	}

	ack := &series{Name: "airlock terminate: answer (API)", Unit: "ms"}
	runcStop := &series{Name: "runc kill KILL + wait + delete", Unit: "ms"}
	run := &series{Name: "airlock run -- true (CLI process)", Unit: "ms"}
	runcMin := &series{Name: "runc run true (minimal rootfs)", Unit: "ms"}
	runcUsr := &series{Name: "runc run true (skeleton + /usr)", Unit: "ms"}
	contenders := []contender{
		{ack, b.terminateAnswer(b.c)},
		{runcStop, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcSleep.killWaitDelete(ctx) }},
		{run, func(ctx context.Context, _ int) (time.Duration, error) { return cliRun(ctx, bin, b.o.socket) }},
		{runcMin, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcMin.run(ctx) }},
		{runcUsr, func(ctx context.Context, _ int) (time.Duration, error) { return p.runcUsr.run(ctx) }},
	}
	shown := []*series{ack, runcStop, run, runcMin, runcUsr}
	var beforeAck, beforeRun *series
	if b.before != nil {
		beforeBin, err := cliBinary(b.before.pid)
		if err != nil {
			return err
		}
		beforeAck = &series{Name: "before: airlock terminate: answer (API)", Unit: "ms"}
		beforeRun = &series{Name: "before: airlock run -- true (CLI process)", Unit: "ms"}
		// Each daemon's contender follows a runc peer, never the other daemon's: a
		// terminate's cleanup runs in its daemon's background for a few ms after the
		// answer, and would otherwise slow whatever comes next (the second daemon's).
		// Only the first terminate of a round follows the last `airlock run`.
		beforeAckC := contender{beforeAck, b.terminateAnswer(b.before.c)}
		beforeRunC := contender{beforeRun, func(ctx context.Context, _ int) (time.Duration, error) {
			return cliRun(ctx, beforeBin, b.o.beforeSocket)
		}}
		c := contenders
		contenders = []contender{c[0], c[1], beforeAckC, c[3], c[2], c[4], beforeRunC}
		shown = append(shown, beforeAck, beforeRun)
	}
	b.rounds(ctx, contenders, b.o.n)

	pending, drain := b.drainCleanups(ctx)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "series\tn\tp50\tp90\tmin\tmax\terrors")
	for _, s := range shown {
		m := s.summary()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d %s\n", m.Name, m.N, fmtNum(m.P50), fmtNum(m.P90), fmtNum(m.Min), fmtNum(m.Max), m.Errors, m.Error)
	}
	tw.Flush()
	ratios := []ratio{
		p50Ratio("terminate answer / runc kill+delete", ack.summary(), runcStop.summary()),
		p50Ratio("airlock run / runc run (minimal)", run.summary(), runcMin.summary()),
		p50Ratio("airlock run / runc run (skeleton + /usr)", run.summary(), runcUsr.summary()),
	}
	if b.before != nil {
		ratios = append(ratios,
			p50Ratio("before: terminate answer / runc kill+delete", beforeAck.summary(), runcStop.summary()),
			p50Ratio("before: airlock run / runc run (minimal)", beforeRun.summary(), runcMin.summary()))
	}
	for _, r := range ratios {
		fmt.Fprintf(stdout, "%s: %s\n", r.Name, fmtNum(r.Value))
	}
	fmt.Fprintf(stdout, "cleanups pending after the last round: %d, all finished %s later\n", pending, drain.Round(time.Millisecond))
	return nil
}

// terminateAnswer times, each round, the answer to a terminate of a sandbox of c's
// daemon that was just created and ran `true` (untimed).
func (b *bench) terminateAnswer(c *client.Client) func(context.Context, int) (time.Duration, error) {
	return func(ctx context.Context, round int) (time.Duration, error) {
		id, _, err := createExec(ctx, c, b.request(fmt.Sprintf("bench-%s-term-%d", b.runID, round+b.o.warmup), ""), []string{"true"}, "")
		b.track(id)
		if err != nil {
			return 0, err
		}
		return terminate(ctx, c, id)
	}
}

// cliBinary is the CLI of the daemon of pid: the airlock beside its binary (airlockd),
// or that binary itself where it is airlock (a tree from before the two were split).
func cliBinary(pid int) (string, error) {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return "", fmt.Errorf("find the daemon's binary: %w", err)
	}
	cli := filepath.Join(filepath.Dir(exe), "airlock")
	if _, err := os.Stat(cli); err != nil {
		return exe, nil
	}
	return cli, nil
}

// cliRun times one `airlock run -- true` process against the daemon at socket.
func cliRun(ctx context.Context, bin, socket string) (time.Duration, error) {
	return timeCommand(ctx, "airlock run", bin, "--socket", socket, "run", "--", "true")
}

// drainCleanups reads how many terminated sandboxes' cleanups the daemon has pending
// (its status's "cleanups" line) and waits, up to a minute, until none is.
func (b *bench) drainCleanups(ctx context.Context) (first int, took time.Duration) {
	start := time.Now()
	first = -1
	for time.Since(start) < time.Minute {
		st, err := b.c.Status(ctx)
		if err != nil {
			break
		}
		n := 0
		for _, c := range st.Checks {
			if c.Name == "cleanups" {
				fmt.Sscanf(c.Detail, "%d pending", &n)
			}
		}
		if first < 0 {
			first = n
		}
		if n == 0 {
			return first, time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return first, time.Since(start)
}
