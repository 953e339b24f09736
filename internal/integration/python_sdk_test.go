package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// pythonBin is the interpreter the Python SDK's tests run under: Debian's, which has
// python3-pytest (scripts/deps.sh installs it).
const pythonBin = "/usr/bin/python3"

// requirePytest skips (fails in CI) unless python3 with pytest is installed.
func requirePytest(t *testing.T) {
	t.Helper()
	msg := ""
	if _, err := os.Stat(pythonBin); err != nil {
		msg = "needs " + pythonBin + " (apt-get install -y python3 python3-pytest)"
	} else if out, err := exec.Command(pythonBin, "-c", "import pytest").CombinedOutput(); err != nil {
		msg = "needs pytest for " + pythonBin + " (apt-get install -y python3-pytest): " + strings.TrimSpace(string(out))
	}
	if msg == "" {
		return
	}
	if testenv.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestPythonSDK runs the Python SDK's pytest suite (sdk/python/tests) against a real
// node: every test there talks to this node's socket, none to a mock of the API. The
// suite removes the sandboxes it makes; the node's cleanup then checks that nothing
// is left on the host.
func TestPythonSDK(t *testing.T) {
	requirePytest(t)
	reg := testenv.NewRegistry(t)
	n := testenv.NewNode(t, testenv.Options{Config: func(c *manager.Config) { c.InsecureRegistries = []string{reg.Host} }})
	pullRef, pullDigest := reg.PushRandom(t, "python/fresh")
	sdk, err := filepath.Abs(filepath.Join("..", "..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonBin, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(sdk, "tests"))
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(),
		"AIRLOCK_SOCKET="+n.Socket,
		"PYTHONPATH="+sdk,
		"PYTHONDONTWRITEBYTECODE=1",
		"AIRLOCK_TEST_PULL_IMAGE="+pullRef+"@"+pullDigest, // an image on the registry, not pulled yet
	)
	// The suite must reach this node and no other: drop what would point it elsewhere.
	cmd.Env = withoutEnv(cmd.Env, "AIRLOCK_URL", "AIRLOCK_TOKEN", "AIRLOCK_API", "AIRLOCK_SESSION_TOKEN_FILE")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest sdk/python/tests: %v\n%s", err, out)
	}
	t.Logf("pytest sdk/python/tests:\n%s", out)

	// Every sandbox the suite made is terminated (the suite's own cleanup, not the node's).
	live := client.ListOptions{States: []string{api.StateCreating, api.StateRunning, api.StateSuspending,
		api.StateSuspended, api.StateResuming, api.StateTerminating, api.StateFailed}}
	sbs, err := n.Client.List(background, live)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		t.Errorf("the Python suite left sandbox %s (%s) in state %s", sb.Name, sb.ID, sb.State)
	}
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, name := range names {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
