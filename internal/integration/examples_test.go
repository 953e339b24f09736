package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testenv"
)

// TestExamples runs the programs in examples/ against a real node, as a reader would:
// the agent loop (a scripted model's code run in a sandbox, its errors fed back), the
// data analysis (a CSV in, a chart out), and the agent loop again through E2B's
// JavaScript SDK.
func TestExamples(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("python", func(t *testing.T) { pythonExamples(t, root) })
	t.Run("e2b_agent_loop", func(t *testing.T) {
		pkg, node := e2bSDK(t)
		n := startE2BDaemon(t)
		key := n.userKey(t, "dev")
		out, err := runNode(t, node, pkg, filepath.Join(root, "examples", "e2b_agent_loop.mjs"), n.sdkEnv(key)...)
		if err != nil {
			t.Fatalf("node examples/e2b_agent_loop.mjs: %v\n%s", err, out)
		}
		if !strings.Contains(out, "NameError") || !strings.Contains(out, "answer: 328") {
			t.Errorf("the E2B agent loop said:\n%s\nwant the first turn's NameError fed back and the answer 328", out)
		}
		for _, sb := range n.sandboxes(t, key) {
			t.Errorf("the E2B agent loop left sandbox %s (%s)", sb.SandboxID, sb.State)
		}
	})
}

// pythonExamples runs the Python programs in examples/.
func pythonExamples(t *testing.T, root string) {
	if _, err := os.Stat(pythonBin); err != nil {
		if testenv.InCI() {
			t.Fatal("needs " + pythonBin)
		}
		t.Skip("needs " + pythonBin)
	}
	n := testenv.NewNode(t)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, pythonBin, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = withoutEnv(append(os.Environ(), "AIRLOCK_SOCKET="+n.Socket, "PYTHONDONTWRITEBYTECODE=1"),
			"AIRLOCK_URL", "AIRLOCK_TOKEN", "AIRLOCK_API", "AIRLOCK_SESSION_TOKEN_FILE")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run(filepath.Join(root, "examples", "agent_loop.py"))
	if !strings.Contains(out, "NameError") || !strings.Contains(out, "answer: 328") {
		t.Errorf("the agent loop said:\n%s\nwant the first turn's NameError fed back and the answer 328", out)
	}
	chart := filepath.Join(t.TempDir(), "chart.svg")
	out = run(filepath.Join(root, "examples", "data_analysis.py"), chart)
	if b, err := os.ReadFile(chart); err != nil || !strings.HasPrefix(string(b), "<svg") || strings.Count(string(b), "<rect") != 6 {
		t.Errorf("the chart downloaded to %s: %v, %.80q; want an SVG with six bars (output: %s)", chart, err, b, out)
	}
}
