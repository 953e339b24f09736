package cluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestNodeLoss: node-1, holding alice's sandboxes, is killed as a host that dies is
// (SIGKILL, its containers gone, its disk kept). Within two lease periods and a sweep,
// node-0 answers that the ones that ran are lost (state lost, a node_lost event, every
// call refused with reason node_lost); the suspended one resumes on node-0 with its
// file as it was written; a lost one that suspended before resumes on node-0 from that
// suspend, the answer saying since when its changes are lost; a lost one that never
// suspended cannot be resumed elsewhere, and the refusal says so. node-1, started
// again, runs no copy of the sandboxes that moved (no container, no sandbox directory),
// takes back the one that never moved, suspended with its changes, and the moved ones
// answer on node-0 through either node.
func TestNodeLoss(t *testing.T) {
	c := newCluster(t, Options{LeasePeriod: 2 * time.Second})
	ctx, cancel := context.WithTimeout(background, 4*time.Minute)
	defer cancel()
	a0, a1 := c.Node(0).As("alice"), c.Node(1).As("alice")

	ids := map[string]string{}
	for _, name := range []string{"sus", "gone", "bare"} {
		resp, err := a1.Create(ctx, api.CreateSandboxRequest{Name: name, NodeSelector: map[string]string{"host": "node-1"}})
		if err != nil || resp.Sandbox == nil || resp.Sandbox.Node != "node-1" {
			t.Fatalf("create %s through node-1: %+v, %v; want it on node-1", name, resp, err)
		}
		ids[name] = resp.Sandbox.ID
		mustExec(t, a1, name, "echo "+name+"-before > /root/f")
	}
	// sus is suspended when node-1 dies; gone suspended once and ran on, changing its
	// file; bare never suspended.
	for _, name := range []string{"sus", "gone"} {
		if _, err := a1.Suspend(ctx, name); err != nil {
			t.Fatalf("suspend %s on node-1: %v", name, err)
		}
	}
	mustExec(t, a1, "gone", "echo gone-after > /root/f")
	mustExec(t, a1, "bare", "echo bare-after > /root/f")
	sus, err := a0.Get(ctx, "sus")
	if err != nil || sus.State != api.StateSuspended || sus.Node != "node-1" {
		t.Fatalf("sus through node-0 before node-1 dies: %+v, %v; want suspended on node-1", sus, err)
	}

	killed := time.Now()
	c.Kill(1)

	// node-0 fences node-1 once its lease lapsed (two periods unrenewed) at its next sweep.
	bound := 2*c.LeasePeriod + 5*time.Second + 2*c.LeasePeriod
	for _, name := range []string{"gone", "bare"} {
		var sb *api.Sandbox
		for {
			sb, err = a0.Get(ctx, name)
			if err == nil && sb.State == api.StateLost || time.Since(killed) > bound {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || sb.State != api.StateLost || sb.Node != "node-1" {
			t.Fatalf("%s through node-0, %v after node-1 was killed: %+v, %v; want lost, on node-1", name, bound, sb, err)
		}
	}
	t.Logf("both running sandboxes read lost %v after node-1 was killed", time.Since(killed).Round(100*time.Millisecond))
	for _, name := range []string{"gone", "bare"} {
		_, err := a0.Exec(ctx, name, api.ExecRequest{Shell: "true", Timeout: "30s"})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "failed_precondition" || ce.Details["reason"] != "node_lost" || ce.Details["node"] != "node-1" ||
			!strings.Contains(ce.Message, "airlock resume "+name) {
			t.Errorf("exec in the lost %s through node-0: %v; want failed_precondition, reason node_lost, naming node-1 and the resume", name, err)
		}
		evs, err := a0.Events(ctx, name, 0)
		if err != nil {
			t.Fatalf("events of %s: %v", name, err)
		}
		var lost []api.Event
		for _, e := range evs {
			if e.Type == "node_lost" {
				lost = append(lost, e)
			}
		}
		if len(lost) != 1 || lost[0].Data["node"] != "node-1" {
			t.Errorf("node_lost events of %s: %+v; want one, naming node-1", name, lost)
		}
	}

	// The suspended sandbox resumes on node-0, its file as written on node-1.
	res, err := a0.Resume(ctx, "sus")
	if err != nil || res.Moved == nil || res.Moved.From != "node-1" || res.Moved.Notice != "" {
		t.Fatalf("resume sus through node-0: %+v, %v; want it moved from node-1, nothing lost", res, err)
	}
	wantFile(t, a0, "sus", "sus-before\n", "node-0")

	// gone resumes from its last suspend: what it wrote after is lost, and said to be.
	res, err = a0.Resume(ctx, "gone")
	if err != nil || res.Moved == nil || res.Moved.From != "node-1" || res.Moved.LostSince == nil ||
		!strings.Contains(res.Moved.Notice, "were on node node-1 and are lost") {
		t.Fatalf("resume the lost gone through node-0: %+v, %v; want it moved from node-1 with a notice of what is lost", res, err)
	}
	wantFile(t, a0, "gone", "gone-before\n", "node-0")

	// bare has no copy of its files off node-1: nothing to resume it from.
	_, err = a0.Resume(ctx, "bare")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "failed_precondition" || ce.Details["reason"] != "node_lost" ||
		!strings.Contains(ce.Message, "nothing to resume it from") {
		t.Fatalf("resume the lost bare through node-0: %v; want failed_precondition (node_lost): nothing to resume it from", err)
	}
	if sb, err := a0.Get(ctx, "bare"); err != nil || sb.State != api.StateLost || sb.Node != "node-1" {
		t.Fatalf("bare after its refused resume: %+v, %v; want still lost on node-1", sb, err)
	}

	// node-1 comes back: it deletes its copies of the moved sandboxes and runs none.
	c.Restart(1)
	n1 := c.Node(1)
	out, err := exec.Command("runc", "--root", filepath.Join(n1.Dir, "runc"), "list", "-q").Output()
	if err != nil {
		t.Fatalf("runc list on node-1: %v", err)
	}
	if running := strings.Fields(string(out)); len(running) > 0 {
		t.Errorf("node-1 runs containers %v after its restart; want none (sus %s, gone %s moved, bare %s lost)", running, ids["sus"], ids["gone"], ids["bare"])
	}
	for _, name := range []string{"sus", "gone"} {
		if _, err := os.Stat(filepath.Join(n1.Dir, "sandboxes", ids[name])); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node-1's directory of %s, which moved to node-0, after its restart: %v; want it deleted", name, err)
		}
	}
	list, err := a1.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatalf("list through node-1: %v", err)
	}
	for _, sb := range list {
		want := map[string]string{"sus": "node-0", "gone": "node-0", "bare": "node-1"}[sb.Name]
		if sb.Node != want || sb.Name == "bare" && sb.State != api.StateSuspended || sb.Name != "bare" && sb.State != api.StateRunning {
			t.Errorf("%s listed through the restarted node-1: %s on %s; want it on %s (bare suspended, the others running)", sb.Name, sb.State, sb.Node, want)
		}
	}
	if names := sandboxNames(list); !slices.Equal(names, []string{"bare", "gone", "sus"}) {
		t.Errorf("alice's sandboxes through node-1: %v; want bare, gone, sus", names)
	}
	for _, cl := range []*client.Client{a0, a1} {
		wantFile(t, cl, "sus", "sus-before\n", "node-0")
		wantFile(t, cl, "gone", "gone-before\n", "node-0")
	}
	// node-1 took bare back with all its changes.
	wantFile(t, a0, "bare", "bare-after\n", "node-1")
}

// wantFile: /root/f in ref, read through cl, is want, and the sandbox runs on node.
func wantFile(t *testing.T, cl *client.Client, ref, want, node string) {
	t.Helper()
	if out := mustExec(t, cl, ref, "cat /root/f"); out != want {
		t.Errorf("%s's /root/f: %q; want %q", ref, out, want)
	}
	if sb, err := cl.Get(background, ref); err != nil || sb.Node != node || sb.State != api.StateRunning {
		t.Errorf("%s: %+v, %v; want it running on %s", ref, sb, err, node)
	}
}

// sandboxNames are the sandboxes' names, sorted.
func sandboxNames(list []api.Sandbox) []string {
	var names []string
	for _, sb := range list {
		names = append(names, sb.Name)
	}
	slices.Sort(names)
	return names
}
