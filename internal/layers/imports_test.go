// Package layers holds the test that keeps Airlock's packages in their rooms: each
// package doc says what it must not import, and this table says the same to the build.
package layers

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/airlockhq/airlock/"

// forbidden lists, per package, the imports its doc rules out. A prefix ending in "/"
// rules out a whole tree; "airlock:" rules out every Airlock package except those named
// after it.
var forbidden = map[string][]string{
	"api":    {"airlock:"},
	"client": {"airlock:api,internal/agentproto,internal/errdefs,internal/httpstatus,internal/tartree"},
	// Tree copies' tar packing and unpacking run on every OS, in the SDK and the agent.
	"internal/tartree":    {"airlock:"},
	"internal/agentproto": {"airlock:internal/errdefs"},
	"internal/errdefs":    {"airlock:", "net/http"},
	// The HTTP edge knows the error classes and bodies, nothing of what the planes serve.
	"internal/httpedge":   {"airlock:internal/errdefs,internal/httpstatus,internal/audit"},
	"internal/httpstatus": {"airlock:internal/errdefs,internal/jsonbody"},
	// The store keeps records and says which error class a refusal is (node leases).
	"internal/store": {"airlock:internal/errdefs"},
	// Membership keeps a lease in the store: nothing of sandboxes or the host.
	"internal/membership": {"airlock:internal/store,internal/errdefs"},
	// The SQL encoding of records knows the contract and its error classes, no store.
	"internal/store/records": {"airlock:internal/store,internal/errdefs"},
	// Placement only decides, from what its caller read.
	"internal/placement": {"airlock:internal/errdefs,internal/units", "os", "net", "syscall", "golang.org/x/sys"},
	"internal/runtime":   {"airlock:"},
	"internal/config":    {"airlock:api,internal/units,internal/labels"},
	"internal/labels":    {"airlock:"},
	"internal/units":     {"airlock:"},
	"internal/clip":      {"airlock:"},
	"internal/durable":   {"airlock:"},
	"internal/version":   {"airlock:"},
	"internal/failpoint": {"airlock:"},
	"internal/idmap":     {"airlock:internal/errdefs"},
	// The router only decides: nothing that reaches the kernel, and not the fence.
	// ("os" and "net" rule out their trees: os/exec, os/user, net/http and the rest.)
	"internal/router": {"airlock:internal/errdefs,internal/router/decision", "syscall", "golang.org/x/sys",
		"github.com/landlock-lsm/go-landlock", "os", "net", "unsafe"},
	// Its vocabulary, which the CLI links, is apart from the scoring and its shell parser.
	"internal/router/decision": {"airlock:internal/errdefs", "syscall", "golang.org/x/sys",
		"github.com/landlock-lsm/go-landlock", "os", "net", "unsafe", "mvdan.cc/sh"},
	"internal/fence": {"airlock:internal/errdefs"},
	// The sidecars run from the agent's binary, which links nothing of the driver.
	"internal/runtime/oci/sidecar": {"airlock:"},
	"internal/mcp":                 {"airlock:api,client,internal/errdefs"},
	"internal/portproxy":           {"airlock:"},
	// The web console is a client of the API: nothing of the daemon's internals.
	"internal/console":    {"airlock:api,internal/agentproto,internal/errdefs"},
	"internal/bindsource": {"airlock:internal/durable"},
	"internal/jsonbody":   {"airlock:internal/errdefs"},
	// The object store knows nothing of what its objects mean.
	"internal/objstore": {"airlock:internal/errdefs,internal/durable"},
	// The E2B-compatible protocol's generated code knows nothing of Airlock.
	"internal/e2b/envdpb/processpb":    {"airlock:"},
	"internal/e2b/envdpb/filesystempb": {"airlock:"},
	"internal/server": {mod + "internal/store", mod + "internal/runtime", mod + "internal/sandboxlink", mod + "internal/network",
		mod + "internal/snapshot", mod + "internal/image", mod + "internal/agent", mod + "internal/daemon", mod + "internal/fence", "golang.org/x/sys/unix"},
	"internal/manager": {mod + "internal/server", "net/http", mod + "internal/runtime/oci", mod + "internal/store/sqlite", mod + "internal/store/postgres",
		mod + "internal/sandboxlink", mod + "internal/network", mod + "internal/daemon", mod + "internal/cli", mod + "internal/fence"},
	"internal/netattach":    {mod + "internal/manager", mod + "internal/network", mod + "internal/server", "net/http", "golang.org/x/sys"},
	"internal/network":      {mod + "internal/manager", mod + "internal/server"},
	"internal/egress":       {mod + "internal/sandboxlink", mod + "internal/store", mod + "internal/manager", mod + "internal/network"},
	"internal/sandboxlink":  {mod + "internal/egress", mod + "internal/store", mod + "internal/manager"},
	"internal/runtime/fake": {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/image"},
	"internal/runtime/oci":  {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/image"},
	"internal/agent":        {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/runtime", mod + "internal/image"},
	"internal/audit":        {mod + "internal/manager", mod + "internal/server", mod + "internal/egress"},
	// The metrics read a Source and count what they are told: nothing of the host.
	"internal/metrics": {mod + "internal/manager", mod + "internal/store", mod + "internal/runtime", mod + "internal/server", "golang.org/x/sys"},
	"internal/e2b": {mod + "internal/server", mod + "internal/store", mod + "internal/runtime", mod + "internal/daemon", mod + "internal/cli",
		mod + "internal/agent", mod + "internal/image", mod + "internal/snapshot"},
	// The test harness builds its nodes with daemon.Assemble, as airlock serve does: it
	// opens none of a node's stores, identities, planes or networks itself.
	"internal/testenv": {mod + "internal/store/sqlite", mod + "internal/store/postgres", mod + "internal/audit", mod + "internal/auth", mod + "internal/server",
		mod + "internal/e2b", mod + "internal/network", mod + "internal/snapshot", mod + "internal/portproxy"},
	"internal/cli": {mod + "internal/manager", mod + "internal/store", mod + "internal/server", mod + "internal/runtime", mod + "internal/daemon", mod + "internal/agent"},
}

// forbiddenInFile lists, per file of a package that needs more as a whole, the imports
// that file's job rules out: the CLI runs commands in the fence, but its scoring only asks
// for a decision.
var forbiddenInFile = map[string][]string{
	"internal/cli/risk.go": {mod + "internal/fence"},
	"internal/cli/run.go":  {mod + "internal/fence"},
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

func TestFilesKeepToTheirRooms(t *testing.T) {
	for file, rules := range forbiddenInFile {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", file), nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("the rules name %s: %v", file, err)
			continue
		}
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			for _, rule := range rules {
				if breaks(imp, rule) {
					t.Errorf("%s imports %s, which its job rules out", file, imp)
				}
			}
		}
	}
}

// breaks says whether importing imp breaks rule. A rule beginning "=" rules out that
// one package and not those under it.
func breaks(imp, rule string) bool {
	if only, ok := strings.CutPrefix(rule, "="); ok {
		return imp == only
	}
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

// daemonPackages and daemonLibraries are the packages, with everything under them, that
// only the daemon's binary (cmd/airlockd) may link: the daemon's own and the large
// libraries only it uses.
var (
	daemonPackages = []string{
		mod + "cmd/airlockd", mod + "internal/daemon", mod + "internal/manager", mod + "internal/server", mod + "internal/store",
		mod + "internal/runtime", mod + "internal/e2b", mod + "internal/network", mod + "internal/egress", mod + "internal/sandboxlink",
		mod + "internal/image", mod + "internal/snapshot", mod + "internal/secret", mod + "internal/auth", mod + "internal/audit",
		mod + "internal/config", mod + "internal/agent",
	}
	daemonLibraries = []string{
		"modernc.org/sqlite", "google.golang.org/protobuf", "github.com/google/go-containerregistry", "connectrpc.com/connect",
		"github.com/miekg/dns", "gopkg.in/yaml.v3",
	}
)

// mustNotLink lists, per binary, the packages it must not link, even indirectly. Every
// CLI call and every sandbox's agent runs the initialisation of each package its binary
// links and faults its pages in: the CLI hands the daemon's verbs to airlockd, and the
// agent is a binary of its own.
var mustNotLink = map[string][]string{
	// The MCP server runs in airlockd too (airlock mcp): it is a long-lived process. So
	// does gc --state-dir, the one verb that sweeps the host (netlink, nftables).
	"cmd/airlock": append(append([]string{mod + "internal/mcp", "github.com/modelcontextprotocol/go-sdk",
		mod + "internal/sweep", "github.com/vishvananda/netlink", "github.com/google/nftables",
		// The router's scoring is the daemon's: the CLI names profiles and places only.
		"=" + mod + "internal/router"}, daemonPackages...), daemonLibraries...),
	// Of Airlock, the agent, its wire format, tree copies' tar packing and the driver's
	// sidecars; no HTTP.
	"cmd/airlock-agent": append([]string{"airlock:cmd/airlock-agent,internal/agent,internal/agentproto,internal/errdefs,internal/clip," +
		"internal/version,internal/runtime/oci/sidecar,internal/tartree", "net/http", "crypto/tls"}, daemonLibraries...),
}

func TestBinariesLinkOnlyTheirOwn(t *testing.T) {
	for bin, rules := range mustNotLink {
		out, err := exec.Command("go", "list", "-deps", mod+bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Fatalf("go list -deps %s listed nothing", bin)
		}
		for _, dep := range deps {
			for _, rule := range rules {
				if breaks(dep, rule) {
					t.Errorf("%s links %s, which it must not (the chain: go list -deps -f '{{.ImportPath}} {{.Imports}}' ./%s)", bin, dep, bin)
				}
			}
		}
	}
}
