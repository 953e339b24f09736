package main

import (
	"fmt"
	"slices"
)

// goals are the benchmark's targets, the one place they are set: judge and the flood
// scenario check against them, and -strict fails the run when one is missed.
var goals = struct {
	createVsRunc   float64 // airlock create → exec p50 / bare runc run p50, at most
	podmanVsCreate float64 // podman run p50 / airlock create → exec p50, at least
	warmExecMS     float64 // warm exec p50, at most
	execVsRunc     float64 // runc exec p50 / airlock exec p50, at least
	daemonIdleMiB  float64 // daemon VmRSS with no sandbox, at most
	agentMiB       float64 // any agent's VmRSS, at most
	burstP50       float64 // burst create → exec p50 / a single one's p50, at most
	burstP99       float64 // burst create → exec p99 / a single one's p50, at most
	floodExec      float64 // warm exec p50 under flood / quiet, at most
	floodDaemonMiB float64 // daemon VmRSS peak under flood, below
}{
	createVsRunc:   1.2,
	podmanVsCreate: 5,
	warmExecMS:     1,
	execVsRunc:     10,
	daemonIdleMiB:  50,
	agentMiB:       10,
	burstP50:       3,
	burstP99:       8,
	floodExec:      2,
	floodDaemonMiB: 256,
}

// atMost and atLeast are a target of a ratio against its goal.
func atMost(name string, v, goal float64, ok bool) target {
	return target{Name: name, Goal: "≤ " + fmtNum(goal) + "x", Value: num(v), Shown: fmtNum(v) + "x", Met: ok && v <= goal}
}

func atLeast(name string, v, goal float64, ok bool) target {
	return target{Name: name, Goal: "≥ " + fmtNum(goal) + "x", Value: num(v), Shown: fmtNum(v) + "x", Met: ok && v >= goal}
}

// judge computes the ratios and checks each target.
func judge(a createResults, ex execResults, idleStart, idleEnd, agentWarm, agentRSS, agentPss *series, conc concurrencyResult, o options) ([]ratio, []target) {
	al, none := a.airlock.summary(), a.airlockNone.summary()
	usr, minimal := a.runcUsr.summary(), a.runcMin.summary()
	ratios := []ratio{
		p50Ratio("airlock (net none) / runc run (+ /usr)", none, usr),
		p50Ratio("airlock (net none) / runc run (minimal)", none, minimal),
		p50Ratio("airlock (default net) / runc run (+ /usr)", al, usr),
		{Name: "CPU airlock create → exec / runc run (mean)", Num: a.cpuAirlock.Name, Den: a.cpuRunc.Name,
			Value: a.cpuAirlock.summary().Mean / a.cpuRunc.summary().Mean},
	}
	if a.before != nil {
		bs := a.before.summary()
		ratios = append(ratios, p50Ratio("before / now: create → exec (default net)", bs, al),
			ratio{Name: "before / now: CPU per create → exec (mean)", Num: a.cpuBefore.Name, Den: a.cpuAirlock.Name,
				Value: a.cpuBefore.summary().Mean / a.cpuAirlock.summary().Mean})
		if a.beforeBurst != nil && conc.Latency != nil {
			bb, nb := a.beforeBurst.summary(), conc.Latency.summary()
			ratios = append(ratios, p50Ratio("before / now: burst create → exec p50", bb, nb),
				ratio{Name: "before / now: burst create → exec p99", Num: bb.Name, Den: nb.Name, Value: bb.P99 / nb.P99})
		}
	}
	var targets []target
	// Bare runc gets an empty network namespace, as Airlock's mode none does.
	rt := atMost(fmt.Sprintf("create→exec p50 ≤ %s× bare runc run", fmtNum(goals.createVsRunc)), float64(none.P50/usr.P50), goals.createVsRunc, none.Errors == 0)
	rt.Note = fmt.Sprintf("Airlock with network none vs runc with its config on skeleton + /usr; %sx with Airlock's default egress network, %sx against the minimal rootfs", fmtNum(al.P50/usr.P50), fmtNum(none.P50/minimal.P50))
	targets = append(targets, rt)
	name := fmt.Sprintf("create→exec ≥ %s× faster than podman run --rm", fmtNum(goals.podmanVsCreate))
	if a.podmanNone != nil {
		pn, pd := a.podmanNone.summary(), a.podmanDefault.summary()
		ratios = append(ratios,
			p50Ratio("podman (default net) / airlock (default net)", pd, al),
			p50Ratio("podman --network=none / airlock (net none)", pn, none))
		// Like for like: both with their default network (a veth each), and both without.
		pt := atLeast(name, float64(pd.P50/al.P50), goals.podmanVsCreate, al.Errors == 0)
		pt.Note = fmt.Sprintf("both with their default network; %sx with none on both sides", fmtNum(pn.P50/none.P50))
		targets = append(targets, pt)
	} else {
		targets = append(targets, target{Name: name, Goal: "≥ " + fmtNum(goals.podmanVsCreate) + "x", Skipped: true, Shown: "-"})
	}

	ae, re := ex.airlock.summary(), ex.runc.summary()
	ratios = append(ratios, p50Ratio("runc exec / airlock exec", re, ae))
	targets = append(targets,
		target{Name: fmt.Sprintf("warm exec p50 ≤ %s ms", fmtNum(goals.warmExecMS)), Goal: "≤ " + fmtNum(goals.warmExecMS) + " ms",
			Value: ae.P50, Shown: fmtNum(ae.P50) + " ms", Met: float64(ae.P50) <= goals.warmExecMS && ae.Errors == 0},
		atLeast(fmt.Sprintf("warm exec ≥ %s× faster than runc exec", fmtNum(goals.execVsRunc)), float64(re.P50/ae.P50), goals.execVsRunc, ae.Errors == 0))

	is, ie := idleStart.summary(), idleEnd.summary()
	targets = append(targets, target{Name: fmt.Sprintf("daemon RSS idle ≤ %s MiB", fmtNum(goals.daemonIdleMiB)), Goal: "≤ " + fmtNum(goals.daemonIdleMiB) + " MiB",
		Value: is.Max, Shown: fmtNum(is.Max) + " MiB", Met: float64(is.Max) <= goals.daemonIdleMiB,
		Note: fmt.Sprintf("at start, no sandbox; %s MiB idle again at the end", fmtNum(ie.Max))})

	all := append(slices.Clone(agentRSS.Values), agentWarm.Values...)
	worst := (&series{Values: all}).summary()
	targets = append(targets, target{Name: fmt.Sprintf("agent RSS per sandbox ≤ %s MiB", fmtNum(goals.agentMiB)), Goal: "≤ " + fmtNum(goals.agentMiB) + " MiB",
		Value: worst.Max, Shown: fmtNum(worst.Max) + " MiB", Met: len(all) > 0 && float64(worst.Max) <= goals.agentMiB,
		Note: fmt.Sprintf("highest VmRSS of %d agents, p50 %s MiB; Pss p50 %s MiB", len(all), fmtNum(worst.P50), fmtNum(agentPss.summary().P50))})

	ct := target{Name: fmt.Sprintf("%d concurrent sandboxes, nothing left", o.concurrency), Goal: "0 failed, 0 leaks",
		Value: num(conc.Failed + len(conc.Leaks)), Shown: fmt.Sprintf("%d failed", conc.Failed)}
	p50 := fmt.Sprintf("burst create→exec p50 ≤ %s× a single one", fmtNum(goals.burstP50))
	p99 := fmt.Sprintf("burst create→exec p99 ≤ %s× a single one", fmtNum(goals.burstP99))
	if o.concurrency == 0 {
		ct.Skipped, ct.Shown = true, "-"
		targets = append(targets, ct,
			target{Name: p50, Goal: "≤ " + fmtNum(goals.burstP50) + "x", Skipped: true, Shown: "-"},
			target{Name: p99, Goal: "≤ " + fmtNum(goals.burstP99) + "x", Skipped: true, Shown: "-"})
		return ratios, targets
	}
	ct.Met = conc.Failed == 0 && len(conc.Leaks) == 0
	ct.Note = fmt.Sprintf("wall %s ms create+exec, %s ms terminate; leaks: %s", fmtNum(conc.CreateExecWallMS), fmtNum(conc.TerminateWallMS), leakText(conc.Leaks))
	// Against the single create of the same network (the daemon's default egress).
	bs := conc.Latency.summary()
	ok := conc.Failed == 0 && al.Errors == 0
	bp50 := atMost(p50, float64(bs.P50/al.P50), goals.burstP50, ok)
	bp50.Note = fmt.Sprintf("p50 %s ms against a single create → exec p50 %s ms", fmtNum(bs.P50), fmtNum(al.P50))
	bp99 := atMost(p99, float64(bs.P99/al.P50), goals.burstP99, ok)
	bp99.Note = fmt.Sprintf("p99 %s ms", fmtNum(bs.P99))
	targets = append(targets, ct, bp50, bp99)
	return ratios, targets
}

// judgeFlood checks the flood scenario's targets.
func judgeFlood(r *floodResult) []target {
	q, f := r.Quiet.summary().P50, r.Flooded.summary().P50
	return []target{
		atMost("warm exec p50 under flood / quiet", float64(f/q), goals.floodExec, true),
		{Name: "victim's denied requests recorded", Goal: fmt.Sprintf("all %d", r.DeniedWant), Value: num(r.DeniedSeen),
			Shown: fmt.Sprintf("%d of %d", r.DeniedSeen, r.DeniedWant), Met: r.DeniedSeen == r.DeniedWant},
		{Name: "daemon VmRSS peak during the flood", Goal: "< " + fmtNum(goals.floodDaemonMiB) + " MiB", Value: num(r.DaemonPeakMiB),
			Shown: fmtNum(r.DaemonPeakMiB) + " MiB", Met: r.DaemonPeakMiB < goals.floodDaemonMiB},
	}
}

// missed names the targets that were neither met nor skipped.
func missed(ts []target) []string {
	var out []string
	for _, t := range ts {
		if !t.Met && !t.Skipped {
			out = append(out, t.Name+" ("+t.Shown+")")
		}
	}
	return out
}
