package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/console"
)

// hostileHost is an egress record's host and reason as a hostile sandbox might get them
// written (the node's proxy checks names before it records them; the page must not
// rely on it).
const hostileHost = `<img src=x onerror=alert("egress") id=injected-egress>`

// fakeAPI answers the calls the console's list and sandbox pages make, for an
// administrator with the token "fake": n sandboxes, their usage, and a sandbox "evil"
// whose egress records carry HTML.
type fakeAPI struct{ n int }

func (f fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer fake" {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: "unauthenticated", Message: "bad token"}})
		return
	}
	now := time.Now().UTC()
	sandbox := func(i int) api.Sandbox {
		return api.Sandbox{ID: fmt.Sprintf("sb_%016d", i), Name: fmt.Sprintf("sandbox-%04d", i), Owner: "team-" + fmt.Sprint(i%7),
			State: []string{"running", "suspended"}[i%2], Image: "host", Runtime: "runc", Generation: 1,
			CreatedAt: now.Add(-time.Duration(i) * time.Minute), Labels: map[string]string{"team": fmt.Sprint(i % 7)}}
	}
	var v any
	p := r.URL.Path
	switch {
	case p == "/v1/whoami":
		v = api.WhoAmI{User: "admin", Roles: []string{"admin"}, Permissions: []string{"admin"}}
	case p == "/v1/status":
		v = api.Status{Version: "fake", Runtimes: []string{"runc"}, Router: &api.RouterStatus{State: "live", Profile: "safe"}}
	case p == "/v1/sandboxes":
		l := api.SandboxList{}
		for i := range f.n {
			l.Sandboxes = append(l.Sandboxes, sandbox(i))
		}
		v = l
	case p == "/v1/stats":
		var out []map[string]any
		for i := range f.n {
			out = append(out, map[string]any{"id": sandbox(i).ID, "cpu": map[string]any{"cores": 0.25}, "memory": map[string]any{"used_bytes": 64 << 20}})
		}
		v = map[string]any{"sandboxes": out}
	case p == "/v1/sandboxes/evil":
		sb := sandbox(0)
		sb.ID, sb.Name, sb.State, sb.Limits = "sb_evil", "evil", "running", api.Limits{CPU: 2, Memory: 1 << 30}
		v = sb
	case p == "/v1/sandboxes/sb_evil/stats":
		hist := []map[string]any{}
		for i := range 30 {
			hist = append(hist, map[string]any{"time": now, "cpu_cores": float64(i%10) / 10, "memory_bytes": i << 20})
		}
		v = map[string]any{"id": "sb_evil", "state": "running", "cpu": map[string]any{"cores": 0.42, "limit_cores": 2},
			"memory": map[string]any{"used_bytes": 300 << 20, "limit_bytes": 1 << 30}, "history": hist}
	case strings.HasSuffix(p, "/sessions"):
		v = api.SessionList{Sessions: []api.Session{}}
	case strings.HasSuffix(p, "/files/list"):
		v = api.FileList{Files: []api.FileInfo{}}
	case p == "/v1/sandboxes/sb_evil/egress":
		v = api.EgressLog{Records: []api.EgressRecord{{Seq: 1, Host: hostileHost, Port: 443, Method: `<script>alert("m")</script>`,
			Decision: "deny", Rule: `<b id="injected-rule">r</b>`, Reason: `<svg onload=alert("reason") id="injected-reason">`, Time: now}}}
	case p == "/v1/events":
		v = api.EventList{Events: []api.Event{}}
	case strings.HasSuffix(p, "/ports"):
		v = api.PortList{Ports: []api.Port{}}
	case p == "/v1/snapshots":
		v = api.SnapshotList{Snapshots: []api.Snapshot{}}
	case p == "/v1/images":
		v = api.ImageList{Images: []api.Image{}}
	default:
		w.WriteHeader(http.StatusNotFound)
		v = api.ErrorBody{Error: api.Error{Code: "not_found", Message: "no such route"}}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// fakeConsole serves the console over fakeAPI{n}, signs the browser in, and returns
// the browser's context and the console's URL.
func fakeConsole(tb testing.TB, n int) (context.Context, string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	bctx := startChromium(tb, ctx)
	fake := fakeAPI{n: n}
	c := console.New(console.Options{API: fake})
	srv := httptest.NewServer(console.Mount(fake, c))
	tb.Cleanup(func() { srv.Close(); c.Close() })
	tctx, tcancel := context.WithTimeout(bctx, 30*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "fake"), chromedp.Click(chromedp.ID("signin-submit")),
		chromedp.WaitVisible(chromedp.ID("sandbox-count"))); err != nil {
		tb.Fatalf("sign in to the console over the fake API: %v", err)
	}
	return bctx, srv.URL
}

// TestConsoleShowsHostileEgressAsText: egress records whose host, method, rule and
// reason carry HTML and script are shown as text on the sandbox's page. It also checks
// the usage graphs drawn from the usage API's shape (GET /v1/sandboxes/{ref}/stats).
func TestConsoleShowsHostileEgressAsText(t *testing.T) {
	bctx, base := fakeConsole(t, 3)
	tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/#/sandbox/evil"), chromedp.WaitVisible(chromedp.ID("egress"))); err != nil {
		t.Fatal(err)
	}
	egress, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("egress")))
	if err != nil {
		t.Fatal(err)
	}
	injected, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('[id^="injected-"], main img, main script, main svg:not(.graph)').length`))
	if err != nil || injected != 0 || !strings.Contains(egress, hostileHost+":443") || !strings.Contains(egress, `<svg onload=alert("reason")`) {
		t.Errorf("hostile egress records: %d injected elements (%v), text %q; want none, and the host and reason as text", injected, err, egress)
	}
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS("#usage svg.cpu polyline"))); err != nil {
		t.Fatalf("the usage graphs: %v", err)
	}
	cpu, _ := chromedp.Run(tctx, chromedp.Text(chromedp.ID("usage-cpu")))
	mem, _ := chromedp.Run(tctx, chromedp.Text(chromedp.ID("usage-memory")))
	if cpu != "0.42" || mem != "300.0 MiB" {
		t.Errorf("usage shown: cpu %q memory %q, want 0.42 and 300.0 MiB", cpu, mem)
	}
}

// BenchmarkConsoleList1000 measures the console's sandbox list of 1,000 sandboxes in
// the browser, over a fake API: ms/render from the list's route to its rows drawn (the
// API call through the console included), beside ms/fetch, the same API call alone.
//
//	go test -run '^$' -bench BenchmarkConsoleList1000 -benchtime 10x ./internal/integration/
func BenchmarkConsoleList1000(b *testing.B) {
	bctx, _ := fakeConsole(b, 1000)
	ctx, cancel := context.WithTimeout(bctx, 5*time.Minute)
	defer cancel()
	const render = `new Promise(resolve => {
	  location.hash = '#/images';
	  setTimeout(() => {
	    const t0 = performance.now();
	    location.hash = '#/sandboxes';
	    const check = () => {
	      const tb = document.getElementById('sandbox-rows');
	      if (tb && tb.rows.length === 1000) requestAnimationFrame(() => resolve(performance.now() - t0));
	      else requestAnimationFrame(check);
	    };
	    check();
	  }, 100);
	})`
	const fetchOnly = `(async () => {
	  const t0 = performance.now();
	  const l = await (await fetch('/console/v1/sandboxes?all_owners=true')).json();
	  if (l.sandboxes.length !== 1000) throw new Error('got ' + l.sandboxes.length);
	  return performance.now() - t0;
	})()`
	var renderMS, fetchMS float64
	b.ResetTimer()
	for range b.N {
		r, err := chromedp.Run(ctx, chromedp.Evaluate[float64](render, chromedp.EvalAwaitPromise))
		if err != nil {
			b.Fatal(err)
		}
		f, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fetchOnly, chromedp.EvalAwaitPromise))
		if err != nil {
			b.Fatal(err)
		}
		renderMS += r
		fetchMS += f
	}
	b.ReportMetric(renderMS/float64(b.N), "ms/render")
	b.ReportMetric(fetchMS/float64(b.N), "ms/fetch")
}
