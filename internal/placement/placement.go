// Package placement decides which nodes of a cluster may take a new sandbox, best
// first: a node takes it only while it is ready, has the memory free that its live
// sandboxes have not reserved (never a count of slots), has as many cores as asked,
// runs the runtime asked for and carries every label of the selector. Among those,
// the one with the most memory free comes first; on a tie, one that already holds the
// image, then the node deciding (no hop), then by name. When none may, the refusal names what each node lacks.
//
// It only decides: it reads nothing (no store, no host) and holds nothing. The caller
// gives it the nodes as they are now; the node that creates admits the sandbox
// again under its own lock, since another create may have taken the room meanwhile.
package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/units"
)

// Ready is the one node state that takes new sandboxes; any other (draining, lost,
// stopped) does not.
const Ready = "ready"

// Request is what a new sandbox needs of its node.
type Request struct {
	Memory int64   // bytes its memory limit reserves
	CPUs   float64 // cores it may use
	// Runtime is the runtime it runs on ("": any node's default).
	Runtime string
	// Image is the digest of its image: a node that holds it already is preferred.
	Image string
	// Selector are the labels its node must carry, each with this value.
	Selector map[string]string
}

// Node is one candidate as the cluster sees it now.
type Node struct {
	Name  string
	State string // Ready, or why the node takes none (draining, lost, stopped)
	// Memory and CPUs are the node's size (zero: not known, not checked); Reserved is
	// the memory its live sandboxes hold.
	Memory   int64
	CPUs     float64
	Reserved int64
	Labels   map[string]string
	// Runtimes are the runtimes the node can run; Images the digests it holds (a
	// preference only, and it may be partial).
	Runtimes []string
	Images   []string
	// Here is the node that decides: on a tie it keeps the sandbox, saving a hop.
	Here bool
}

// Free is the memory the node has that no live sandbox reserves.
func (n Node) Free() int64 { return max(n.Memory-n.Reserved, 0) }

// Shortfall says why n cannot take r ("": it can).
func Shortfall(r Request, n Node) string {
	switch {
	case n.State != Ready:
		return fmt.Sprintf("%s is %s", n.Name, n.State)
	case r.Runtime != "" && !slices.Contains(n.Runtimes, r.Runtime):
		return fmt.Sprintf("%s lacks runtime %s", n.Name, r.Runtime)
	}
	if miss := missingLabels(r.Selector, n.Labels); miss != "" {
		return fmt.Sprintf("%s lacks label %s", n.Name, miss)
	}
	switch {
	case r.CPUs > n.CPUs && n.CPUs > 0:
		return fmt.Sprintf("%s has %g CPUs", n.Name, n.CPUs)
	case r.Memory > n.Free() && n.Memory > 0:
		return fmt.Sprintf("%s has %s free", n.Name, units.FormatSize(n.Free()))
	}
	return ""
}

// missingLabels names the selector's labels that labels lacks or holds with another
// value, in key order ("": none).
func missingLabels(selector, labels map[string]string) string {
	var miss []string
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		if v, ok := labels[k]; !ok || v != selector[k] {
			miss = append(miss, k+"="+selector[k])
		}
	}
	return strings.Join(miss, ",")
}

// Decide returns the names of the nodes that can take r, best first: the most memory
// free, then the image already held, then the node deciding, then by name. When none can, it is a quota
// error that names r's needs and each node's shortfall, with details {memory, cpus,
// runtime, selector, nodes: {name: shortfall}}.
func Decide(r Request, nodes []Node) ([]string, error) {
	var fit []Node
	short := map[string]string{}
	var why []string
	for _, n := range slices.SortedFunc(slices.Values(nodes), func(a, b Node) int { return cmp.Compare(a.Name, b.Name) }) {
		if s := Shortfall(r, n); s != "" {
			short[n.Name] = s
			why = append(why, s)
			continue
		}
		fit = append(fit, n)
	}
	if len(fit) == 0 {
		if len(nodes) == 0 {
			why = append(why, "the cluster has no node")
		}
		return nil, errdefs.Quota("no node can hold %s: %s", describe(r), strings.Join(why, ", ")).
			WithDetails(map[string]any{"memory": r.Memory, "cpus": r.CPUs, "runtime": r.Runtime, "selector": r.Selector, "nodes": short})
	}
	slices.SortStableFunc(fit, func(a, b Node) int {
		if c := cmp.Compare(b.Free(), a.Free()); c != 0 {
			return c
		}
		if c := preferTrue(slices.Contains(a.Images, r.Image), slices.Contains(b.Images, r.Image)); c != 0 {
			return c
		}
		return preferTrue(a.Here, b.Here)
	})
	names := make([]string, len(fit))
	for i, n := range fit {
		names[i] = n.Name
	}
	return names, nil
}

// preferTrue orders a before b when only a is true, and after it when only b is.
func preferTrue(a, b bool) int {
	switch {
	case a && !b:
		return -1
	case b && !a:
		return 1
	}
	return 0
}

// describe is what r asks for, as a refusal names it: "2GiB of memory, 2 CPUs,
// runtime runsc, labels zone=a".
func describe(r Request) string {
	s := units.FormatSize(r.Memory) + " of memory"
	if r.CPUs > 0 {
		s += fmt.Sprintf(", %g CPUs", r.CPUs)
	}
	if r.Runtime != "" {
		s += ", runtime " + r.Runtime
	}
	if len(r.Selector) > 0 {
		s += ", labels " + missingLabels(r.Selector, nil)
	}
	return s
}
