package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// airlock stats prints one row a sandbox in docker stats' columns, or with -o json the
// API's objects; a name that is no sandbox is an error.
func TestStatsVerb(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box", "--memory", "64MiB")
	out := n.must(t, "stats")
	wantContains(t, "stats", out, "NAME", "CPU %", "MEM USAGE / LIMIT", "NET RX / TX", "box", "running", "1MiB / 64MiB")
	out = n.must(t, "stats", "box", "-o", "json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 {
		t.Fatalf("stats -o json: %q (%v); want one object", out, err)
	}
	for _, k := range []string{"cpu", "memory", "disk", "pids", "network"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("stats -o json lacks %s: %v", k, list[0])
		}
	}
	n.must(t, "suspend", "box")
	out = n.must(t, "stats", "box")
	if !strings.Contains(out, "suspended") || !strings.Contains(out, "0B / -") {
		t.Errorf("stats of a suspended sandbox: %q; want its state and zeros", out)
	}
}
