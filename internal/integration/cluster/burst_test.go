package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// Burst sizes: each node holds burstFit sandboxes of burstMemory, and burstCreates
// are sent at once, more than the cluster holds.
const (
	burstMemory  = 64 << 20
	burstFit     = 24
	burstCreates = 200
)

// TestCreateBurst: 200 creates sent at once, spread over the three nodes' APIs, each
// asking 64MiB while each node's node.memory holds 24 of them. Every create is either
// placed (its record names a node that runs it) or refused as quota_exceeded naming
// the memory it lacks; no node's sandboxes' limits ever sum past its node.memory (by
// the records, by node ls's reservations and by the memory cgroups on each host); no
// record is left creating or failed, and each node runs a container for each record it
// holds and none other. The harness's cleanup then checks that nothing is left.
func TestCreateBurst(t *testing.T) {
	capacity := int64(burstFit * burstMemory)
	c := newCluster(t, Options{NodeMemory: strconv.FormatInt(capacity>>20, 10) + "MiB"})
	ctx, cancel := context.WithTimeout(background, 4*time.Minute)
	defer cancel()
	owners := make([]*client.Client, len(c.Nodes()))
	for i, n := range c.Nodes() {
		owners[i] = n.As("alice")
	}

	type result struct {
		resp *api.OperationResponse
		err  error
	}
	results := make([]result, burstCreates)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range burstCreates {
		wg.Go(func() {
			<-start
			resp, err := owners[i%len(owners)].Create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("burst-%03d", i),
				Limits: api.Limits{Memory: burstMemory}, Network: &api.NetworkPolicy{Mode: "none"}})
			results[i] = result{resp, err}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)

	nodes := map[string]bool{}
	for _, n := range c.Nodes() {
		nodes[n.Name] = true
	}
	placed := map[string]string{} // id -> node
	perNode := map[string]int{}
	refused := 0
	for i, r := range results {
		var ce *client.Error
		switch {
		case r.err == nil:
			sb := r.resp.Sandbox
			if sb == nil || !nodes[sb.Node] {
				t.Errorf("create %d answered %+v; want its sandbox, on one of the nodes", i, r.resp)
				continue
			}
			placed[sb.ID] = sb.Node
			perNode[sb.Node]++
		case errors.As(r.err, &ce) && ce.Code == "quota_exceeded" && strings.Contains(ce.Message, "free"):
			refused++
		default:
			t.Errorf("create %d through node-%d: %v; want it placed, or refused as quota_exceeded naming the memory free", i, i%len(owners), r.err)
		}
	}
	t.Logf("%d creates at once in %v: %d placed %v, %d refused", burstCreates, took.Round(time.Millisecond), len(placed), perNode, refused)
	if len(placed) == 0 || refused == 0 {
		t.Errorf("%d placed, %d refused; want both: the cluster holds %d of the %d", len(placed), refused, burstFit*len(nodes), burstCreates)
	}

	// The records: every one running, on the node its create named, within its node.memory.
	list, err := c.Node(0).Client.List(ctx, client.ListOptions{AllOwners: true})
	if err != nil {
		t.Fatalf("list every sandbox: %v", err)
	}
	reserved := map[string]int64{}
	held := map[string]map[string]bool{} // node -> ids
	for _, sb := range list {
		if sb.State != api.StateRunning {
			t.Errorf("sandbox %s (%s) on %s is %s (%s); want running", sb.Name, sb.ID, sb.Node, sb.State, sb.Failure)
		}
		if node, ok := placed[sb.ID]; !ok || node != sb.Node {
			t.Errorf("sandbox %s (%s) is on %q; its create answered %q", sb.Name, sb.ID, sb.Node, node)
		}
		reserved[sb.Node] += sb.Limits.Memory
		if held[sb.Node] == nil {
			held[sb.Node] = map[string]bool{}
		}
		held[sb.Node][sb.ID] = true
	}
	if len(list) != len(placed) {
		t.Errorf("%d records; want the %d placed", len(list), len(placed))
	}
	for node, sum := range reserved {
		if sum > capacity {
			t.Errorf("%s's sandboxes' memory limits sum to %d MiB; its node.memory is %d MiB", node, sum>>20, capacity>>20)
		}
	}

	// What each node says of itself, and what it runs.
	for _, n := range c.Nodes() {
		wantReserved(t, c, n, capacity, reserved[n.Name])
		containers := runcContainers(t, n)
		for id := range held[n.Name] {
			if !containers["airlock-"+id] {
				t.Errorf("%s holds the record of %s but runs no container for it", n.Name, id)
			}
		}
		for cid := range containers {
			if !held[n.Name][strings.TrimPrefix(cid, "airlock-")] {
				t.Errorf("%s runs container %s, of no record of its own", n.Name, cid)
			}
		}
		limits := cgroupLimits(t, n)
		var sum int64
		for _, l := range limits {
			sum += l
		}
		if len(limits) != len(held[n.Name]) || sum > capacity {
			t.Errorf("%s's memory cgroups: %d, limits summing to %d MiB; want %d, within %d MiB",
				n.Name, len(limits), sum>>20, len(held[n.Name]), capacity>>20)
		}
	}
}

// wantReserved: node ls through n shows n's capacity as node.memory and, once its lease
// is renewed, the memory its records reserve.
func wantReserved(t *testing.T, c *Cluster, n *Node, capacity, reserved int64) {
	t.Helper()
	var got api.Node
	deadline := time.Now().Add(4 * c.LeasePeriod)
	for {
		for _, row := range n.nodeList(t) {
			if row.Name == n.Name {
				got = row
			}
		}
		if got.Reserved.Memory == reserved || time.Now().After(deadline) {
			break
		}
		time.Sleep(c.LeasePeriod / 2)
	}
	if got.Capacity.Memory != capacity || got.Reserved.Memory != reserved {
		t.Errorf("node ls on %s: capacity %d MiB, reserved %d MiB; want %d MiB, %d MiB", n.Name,
			got.Capacity.Memory>>20, got.Reserved.Memory>>20, capacity>>20, reserved>>20)
	}
}

// runcContainers are the ids of the containers n's runc holds.
func runcContainers(t *testing.T, n *Node) map[string]bool {
	t.Helper()
	rt := n.record().Runtimes[0]
	out, err := exec.Command(rt.Binary, "--root", rt.Root, "list", "-q").Output()
	if err != nil {
		t.Fatalf("runc list on %s: %v", n.Name, err)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		ids[id] = true
	}
	return ids
}

// cgroupLimits are the memory limits of the cgroups under n's cgroup parent, by name.
func cgroupLimits(t *testing.T, n *Node) map[string]int64 {
	t.Helper()
	limits := map[string]int64{}
	for _, dir := range testenv.CgroupDirs(n.cgroup) {
		var file string
		switch filepath.Dir(dir) {
		case "/sys/fs/cgroup": // cgroup v2 alone
			file = "memory.max"
		case "/sys/fs/cgroup/memory":
			file = "memory.limit_in_bytes"
		default:
			continue // a hierarchy of another controller
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), file))
			if err != nil {
				t.Errorf("%s's cgroup %s: %v", n.Name, e.Name(), err)
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Errorf("%s's cgroup %s: %s %q", n.Name, e.Name(), file, b)
			}
			limits[e.Name()] = v
		}
	}
	return limits
}
