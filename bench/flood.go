package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// floodScript runs inside the flooding sandbox: "dns SECONDS" sends DNS queries for
// random names to the sandbox's resolver as fast as it can; "conn SECONDS N" opens up to
// N connections to the egress proxy, holds them and opens new ones as the old fail.
const floodScript = `
import os, random, socket, string, sys, time
mode, secs = sys.argv[1], float(sys.argv[2])
end = time.time() + secs
if mode == "dns":
    ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    while time.time() < end:
        name = "".join(random.choice(string.ascii_lowercase) for _ in range(12)) + ".flood.example"
        q = os.urandom(2) + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        for part in name.split("."):
            q += bytes([len(part)]) + part.encode()
        q += b"\x00\x00\x01\x00\x01"
        try:
            s.sendto(q, (ns, 53))
            s.recv(512)
        except OSError:
            pass
elif mode == "conn":
    want = int(sys.argv[3])
    p = os.environ.get("HTTP_PROXY", "").rsplit("/", 1)[-1].rsplit(":", 1)
    host, port = p[0].lstrip("/"), int(p[1])
    held = []
    while time.time() < end:
        try:
            c = socket.create_connection((host, port), timeout=1)
            held.append(c)
        except OSError:
            time.sleep(0.01)
        if len(held) >= want:
            held.pop(0).close()
`

// denyScript makes N proxied requests to hosts no policy allows: each is one egress
// record with the decision "deny".
const denyScript = `
import os, socket, sys
n = int(sys.argv[1])
p = os.environ["HTTP_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
host, port = p[0], int(p[1])
for i in range(n):
    c = socket.create_connection((host, port), timeout=10)
    c.sendall(("GET http://denied-%d.bench.example/ HTTP/1.1\r\nHost: denied-%d.bench.example\r\nConnection: close\r\n\r\n" % (i, i)).encode())
    while c.recv(4096):
        pass
    c.close()
`

// floodResult is what the flood scenario measured.
type floodResult struct {
	Quiet, Flooded     *series
	DeniedWant         int
	DeniedSeen         int
	DaemonPeakMiB      float64
	FlooderDenied      int // egress records of the flooding sandbox
	OutputCalls        atomic.Int64
	OutputErrors       atomic.Int64
	FlooderDroppedNote string
}

// runFlood is the -flood run: the flood scenario alone, as a table with verdicts.
func (b *bench) runFlood(ctx context.Context, stdout io.Writer) error {
	var err error
	if b.c, err = client.New(client.Options{Socket: b.o.socket}); err != nil {
		return err
	}
	pid := b.o.daemonPID
	if pid == 0 {
		if pid, err = daemonPID(b.o.socket); err != nil {
			return fmt.Errorf("find the daemon's pid: %w", err)
		}
	}
	r, err := b.floodPhase(ctx, pid, b.o.flood)
	if err != nil {
		return err
	}
	ts := judgeFlood(r)
	writeFlood(stdout, r, ts)
	if m := missed(ts); b.o.strict && len(m) > 0 {
		return &missedError{m}
	}
	return nil
}

// floodPhase measures a victim sandbox's warm exec and audit trail while a second
// sandbox floods the daemon with DNS queries, proxy connections and non-streamed output
// at once, sampling the daemon's resident set throughout.
func (b *bench) floodPhase(ctx context.Context, pid int, seconds int) (*floodResult, error) {
	victim, _, err := createExec(ctx, b.c, b.request("bench-"+b.runID+"-victim", ""), []string{"true"}, "")
	b.track(victim)
	if err != nil {
		return nil, err
	}
	flooder, _, err := createExec(ctx, b.c, b.request("bench-"+b.runID+"-flooder", ""), []string{"true"}, "")
	b.track(flooder)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct{ sb, path, text string }{
		{flooder, "/root/flood.py", floodScript}, {victim, "/root/deny.py", denyScript},
	} {
		if _, err := b.c.Upload(ctx, f.sb, f.path, 0o644, strings.NewReader(f.text)); err != nil {
			return nil, fmt.Errorf("upload %s: %w", f.path, err)
		}
	}
	r := &floodResult{
		Quiet:      &series{Name: "f. victim warm exec, quiet", Unit: "ms"},
		Flooded:    &series{Name: "f. victim warm exec, under flood", Unit: "ms"},
		DeniedWant: 50,
	}
	n := b.o.execN
	for i := 0; i < n; i++ {
		d, err := execTrue(ctx, b.c, victim)
		if err != nil {
			r.Quiet.fail(err)
			continue
		}
		r.Quiet.addDuration(d)
	}

	b.logf("flooding from %s for %d s: DNS, proxy connections and output", flooder, seconds)
	start := fmt.Sprintf("setsid python3 /root/flood.py dns %d >/dev/null 2>&1 & setsid python3 /root/flood.py conn %d 3000 >/dev/null 2>&1 &", seconds, seconds)
	if res, err := b.c.Exec(ctx, flooder, api.ExecRequest{Shell: start}); err != nil {
		return nil, fmt.Errorf("start the flood: %w", err)
	} else if err := checkResult(res, ""); err != nil {
		return nil, fmt.Errorf("start the flood: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var peak atomic.Uint64 // KiB
	wg.Add(1)
	go func() { // the daemon's resident set, every 50 ms
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := procMiB(pid, "status", "VmRSS"); err == nil {
				kib := uint64(v * 1024)
				for old := peak.Load(); kib > old && !peak.CompareAndSwap(old, kib); old = peak.Load() {
				}
			}
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for i := 0; i < 4; i++ { // output floods: NUL bytes, buffered by the daemon
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fctx.Err() == nil {
				_, err := b.c.Exec(fctx, flooder, api.ExecRequest{Shell: "head -c 200000000 /dev/zero"})
				r.OutputCalls.Add(1)
				if err != nil && fctx.Err() == nil {
					r.OutputErrors.Add(1)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // let the floods build up
	res, err := b.c.Exec(ctx, victim, api.ExecRequest{Argv: []string{"python3", "/root/deny.py", fmt.Sprint(r.DeniedWant)}})
	if err != nil {
		return nil, fmt.Errorf("denied requests from the victim: %w", err)
	}
	if err := checkResult(res, ""); err != nil {
		return nil, fmt.Errorf("denied requests from the victim: %w", err)
	}
	for i := 0; i < n && fctx.Err() == nil; i++ {
		d, err := execTrue(ctx, b.c, victim)
		if err != nil {
			r.Flooded.fail(err)
			continue
		}
		r.Flooded.addDuration(d)
	}
	<-fctx.Done()
	wg.Wait()
	r.DaemonPeakMiB = float64(peak.Load()) / 1024

	// Records may still be queued: give the writer a moment, then count.
	time.Sleep(2 * time.Second)
	recs, err := b.c.EgressLog(ctx, victim, 0)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if strings.HasSuffix(rec.Host, ".bench.example") && strings.HasPrefix(rec.Host, "denied-") {
			r.DeniedSeen++
		}
	}
	if recs, err := b.c.EgressLog(ctx, flooder, 0); err == nil {
		r.FlooderDenied = len(recs)
	}
	if evs, err := b.c.Events(ctx, flooder, 0); err == nil {
		for _, ev := range evs {
			if strings.Contains(ev.Type, "dropped") || strings.Contains(fmt.Sprint(ev.Data), "dropped") {
				r.FlooderDroppedNote = fmt.Sprintf("%s %v", ev.Type, ev.Data)
			}
		}
	}
	return r, nil
}

// writeFlood prints the flood scenario's table and verdicts.
func writeFlood(w io.Writer, r *floodResult, ts []target) {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  series\tunit\tn\tp50\tp90\tmax\terrors\t")
	for _, s := range []*series{r.Quiet, r.Flooded} {
		sm := s.summary()
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%d\t\n", sm.Name, sm.Unit, sm.N, float64(sm.P50), float64(sm.P90), float64(sm.Max), sm.Errors)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range ts {
		fmt.Fprintf(w, "  %s: %s (target %s: %s)\n", t.Name, t.Shown, t.Goal, verdict(t.Met))
	}
	fmt.Fprintf(w, "  flooder: %d egress records kept, %d output calls (%d errors)\n", r.FlooderDenied, r.OutputCalls.Load(), r.OutputErrors.Load())
	if r.FlooderDroppedNote != "" {
		fmt.Fprintf(w, "  flooder's last drop event: %s\n", r.FlooderDroppedNote)
	}
	for _, s := range []*series{r.Quiet, r.Flooded} {
		if s.Error != "" {
			fmt.Fprintf(w, "  first error of %s: %s\n", s.Name, s.Error)
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
