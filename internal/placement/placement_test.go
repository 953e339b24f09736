package placement

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

const gib = 1 << 30

func node(name string, memory, reserved int64, edit ...func(*Node)) Node {
	n := Node{Name: name, State: Ready, Memory: memory, CPUs: 4, Reserved: reserved, Runtimes: []string{"runc"}}
	for _, e := range edit {
		e(&n)
	}
	return n
}

func here(n *Node) { n.Here = true }

func state(s string) func(*Node)       { return func(n *Node) { n.State = s } }
func runtimes(r ...string) func(*Node) { return func(n *Node) { n.Runtimes = r } }
func images(d ...string) func(*Node)   { return func(n *Node) { n.Images = d } }
func labels(kv ...string) func(*Node) {
	return func(n *Node) {
		n.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name    string
		req     Request
		nodes   []Node
		want    []string
		wantErr string
	}{
		{name: "most free memory first",
			req:   Request{Memory: gib},
			nodes: []Node{node("a", 8*gib, 6*gib), node("b", 8*gib, 1*gib), node("c", 16*gib, 12*gib)},
			want:  []string{"b", "c", "a"}},
		{name: "image held breaks a tie",
			req:   Request{Memory: gib, Image: "sha256:x"},
			nodes: []Node{node("a", 8*gib, 0), node("b", 8*gib, 0, images("sha256:y", "sha256:x")), node("c", 4*gib, 0, images("sha256:x"))},
			want:  []string{"b", "a", "c"}},
		{name: "the deciding node keeps a tie, after the image",
			req:   Request{Memory: gib, Image: "sha256:x"},
			nodes: []Node{node("a", 8*gib, 0), node("b", 8*gib, 0, here), node("c", 8*gib, 0, images("sha256:x")), node("d", 9*gib, 0)},
			want:  []string{"d", "c", "b", "a"}},
		{name: "draining, lost and stopped take none",
			req:   Request{Memory: gib},
			nodes: []Node{node("a", 8*gib, 0, state("draining")), node("b", 8*gib, 0, state("lost")), node("c", 8*gib, 0, state("stopped")), node("d", 2*gib, gib)},
			want:  []string{"d"}},
		{name: "a node holds exactly its memory",
			req:   Request{Memory: 2 * gib},
			nodes: []Node{node("a", 4*gib, 2*gib)},
			want:  []string{"a"}},
		{name: "runtime runsc only where it is",
			req:   Request{Memory: gib, Runtime: "runsc"},
			nodes: []Node{node("a", 8*gib, 0), node("b", 4*gib, 0, runtimes("runc", "runsc"))},
			want:  []string{"b"}},
		{name: "selector matches every label",
			req:   Request{Memory: gib, Selector: map[string]string{"zone": "a", "gpu": "yes"}},
			nodes: []Node{node("a", 8*gib, 0, labels("zone", "a")), node("b", 8*gib, 0, labels("zone", "b", "gpu", "yes")), node("c", 2*gib, 0, labels("zone", "a", "gpu", "yes", "x", "y"))},
			want:  []string{"c"}},
		{name: "refusal names each shortfall",
			req:     Request{Memory: 2 * gib, Runtime: "runsc"},
			nodes:   []Node{node("c", 8*gib, 0), node("a", 4*gib, 2*gib+gib*9/10, runtimes("runsc")), node("b", 8*gib, 0, state("draining"))},
			wantErr: "no node can hold 2GiB of memory, runtime runsc: a has 1.1GiB free, b is draining, c lacks runtime runsc"},
		{name: "refusal names a missing label and too few CPUs",
			req:     Request{Memory: gib, CPUs: 8, Selector: map[string]string{"zone": "a"}},
			nodes:   []Node{node("a", 8*gib, 0, labels("zone", "b")), node("b", 8*gib, 0, labels("zone", "a"))},
			wantErr: "no node can hold 1GiB of memory, 8 CPUs, labels zone=a: a lacks label zone=a, b has 4 CPUs"},
		{name: "overcommitted node has nothing free",
			req:     Request{Memory: 16 << 20},
			nodes:   []Node{node("a", gib, 2*gib)},
			wantErr: "no node can hold 16MiB of memory: a has 0B free"},
		{name: "no node at all",
			req:     Request{Memory: gib},
			wantErr: "no node can hold 1GiB of memory: the cluster has no node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decide(c.req, c.nodes)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr || !errors.Is(err, errdefs.ErrQuotaExceeded) {
					t.Fatalf("Decide = %v, %v; want quota error %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("Decide = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestDecideRefusalDetails(t *testing.T) {
	_, err := Decide(Request{Memory: 2 * gib}, []Node{node("a", gib, 0), node("b", 8*gib, 0, state("lost"))})
	d := errdefs.Details(err)
	short, _ := d["nodes"].(map[string]string)
	if d["memory"] != int64(2*gib) || short["a"] != "a has 1GiB free" || short["b"] != "b is lost" {
		t.Fatalf("details = %v; want memory asked and each node's shortfall", d)
	}
}
