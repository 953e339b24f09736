// Package layers holds the test that keeps Airlock's packages in their rooms: each
// package doc says what it must not import, and this table says the same to the build.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/airlockhq/airlock/"

// forbidden lists, per package, the imports its doc rules out. A prefix ending in "/"
// rules out a whole tree; "airlock:" rules out every Airlock package except those named
// after it.
var forbidden = map[string][]string{
	"api":                 {"airlock:"},
	"client":              {"airlock:api,internal/agentproto,internal/errdefs"},
	"internal/agentproto": {"airlock:internal/errdefs"},
	"internal/errdefs":    {"airlock:"},
	"internal/store":      {"airlock:"},
	"internal/runtime":    {"airlock:"},
	"internal/config":     {"airlock:api,internal/units"},
	"internal/units":      {"airlock:"},
	"internal/clip":       {"airlock:"},
	"internal/durable":    {"airlock:"},
	"internal/version":    {"airlock:"},
	"internal/failpoint":  {"airlock:"},
	"internal/idmap":      {"airlock:internal/errdefs"},
	"internal/router":     {"airlock:internal/errdefs"},
	"internal/mcp":        {"airlock:api,client,internal/errdefs"},
	"internal/portproxy":  {"airlock:"},
	"internal/bindsource": {"airlock:internal/durable"},
	"internal/jsonbody":   {"airlock:internal/errdefs"},
	// The E2B-compatible protocol's generated code knows nothing of Airlock.
	"internal/e2b/envdpb/processpb":    {"airlock:"},
	"internal/e2b/envdpb/filesystempb": {"airlock:"},
	"internal/server": {mod + "internal/store", mod + "internal/runtime", mod + "internal/sandboxlink", mod + "internal/network",
		mod + "internal/snapshot", mod + "internal/image", mod + "internal/agent", mod + "internal/daemon", "golang.org/x/sys/unix"},
	"internal/manager": {mod + "internal/server", "net/http", mod + "internal/runtime/oci", mod + "internal/store/sqlite",
		mod + "internal/sandboxlink", mod + "internal/network", mod + "internal/daemon", mod + "internal/cli"},
	"internal/egress":       {mod + "internal/sandboxlink", mod + "internal/store", mod + "internal/manager", mod + "internal/network"},
	"internal/sandboxlink":  {mod + "internal/egress", mod + "internal/store", mod + "internal/manager"},
	"internal/runtime/fake": {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/image"},
	"internal/runtime/oci":  {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/image"},
	"internal/agent":        {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/runtime", mod + "internal/image"},
	"internal/audit":        {mod + "internal/manager", mod + "internal/server", mod + "internal/egress"},
	"internal/e2b": {mod + "internal/server", mod + "internal/store", mod + "internal/runtime", mod + "internal/daemon", mod + "internal/cli",
		mod + "internal/agent"},
	"internal/cli": {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/runtime", mod + "internal/daemon", mod + "internal/agent"},
}

// pending are imports the rules forbid that the code still has; each is work to do, and
// the test fails once one is gone, so the list only shrinks.
var pending = map[string]bool{}

func TestPackagesKeepToTheirRooms(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		rules, ok := forbidden[pkg]
		if !ok {
			continue
		}
		seen[pkg] = true
		for _, imp := range fields[1:] {
			for _, rule := range rules {
				if !breaks(imp, rule) {
					continue
				}
				key := pkg + " -> " + imp
				if pending[key] {
					delete(pending, key)
					continue
				}
				t.Errorf("%s imports %s, which its package doc rules out", pkg, imp)
			}
		}
	}
	for pkg := range forbidden {
		if !seen[pkg] {
			t.Errorf("the rules name %s, which is no package of the module", pkg)
		}
	}
	for key := range pending {
		t.Errorf("%s is no longer imported: remove it from the pending list", key)
	}
}

// breaks says whether importing imp breaks rule.
func breaks(imp, rule string) bool {
	if allowed, ok := strings.CutPrefix(rule, "airlock:"); ok {
		if !strings.HasPrefix(imp, mod) {
			return false
		}
		for _, a := range strings.Split(allowed, ",") {
			if a != "" && imp == mod+a {
				return false
			}
		}
		return true
	}
	return imp == rule || strings.HasPrefix(imp, rule+"/")
}
