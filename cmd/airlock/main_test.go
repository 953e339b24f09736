package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildAll builds airlock, airlockd and airlock-agent into a new directory, as make
// build does.
func buildAll(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// run runs bin with args and returns its combined output and exit code.
func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out), 0
}

// TestVerbsOfOtherBinaries: airlock hands serve, check-config and mcp to the airlockd
// beside it and agent to the airlock-agent beside it (also when airlock is reached through a
// symbolic link), answers their help itself, and says what is missing when the binary
// is not there.
func TestVerbsOfOtherBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := buildAll(t)
	cfg := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("log_level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("live_cap: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "airlock")
	if err := os.Symlink(filepath.Join(dir, "airlock"), link); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{filepath.Join(dir, "airlock"), link} {
		// The CLI links no configuration code: only airlockd can have checked the file.
		if out, code := run(t, bin, "check-config", cfg); code != 0 || out != cfg+": ok\n" {
			t.Errorf("%s check-config FILE: exit %d, %q; want exit 0, %q", bin, code, out, cfg+": ok\n")
		}
		if out, code := run(t, bin, "check-config", bad); code != 1 || !strings.Contains(out, "live_cap") {
			t.Errorf("%s check-config BAD: exit %d, %q; want exit 1 naming live_cap", bin, code, out)
		}
		// The agent's own check of its flags, which the CLI does not link.
		if out, code := run(t, bin, "agent", "--workdir", "/"); code != 2 || !strings.Contains(out, "exactly one of --socket") {
			t.Errorf("%s agent without a channel: exit %d, %q; want exit 2 from the agent", bin, code, out)
		}
	}
	if out, code := run(t, filepath.Join(dir, "airlockd"), "agent", "--workdir", "/"); code != 2 || !strings.Contains(out, "exactly one of --socket") {
		t.Errorf("airlockd agent without a channel: exit %d, %q; want exit 2 from the agent", code, out)
	}
	if out, code := run(t, filepath.Join(dir, "airlock-agent"), "--version"); code != 0 || !strings.HasPrefix(out, "airlock-agent ") {
		t.Errorf("airlock-agent --version: exit %d, %q; want its version, which the driver's probe looks for", code, out)
	}

	for _, f := range []string{"airlockd", "airlock-agent"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(t.TempDir(), "state")
	out, code := run(t, filepath.Join(dir, "airlock"), "serve", "--state-dir", state, "--socket", filepath.Join(t.TempDir(), "api.sock"))
	if code != 1 || !strings.Contains(out, "airlockd") || !strings.Contains(out, dir) {
		t.Errorf("serve without airlockd: exit %d, %q; want exit 1 naming airlockd and %s", code, out, dir)
	}
	if _, err := os.Lstat(state); err == nil {
		t.Errorf("serve without airlockd made its state directory")
	}
	// The MCP server is airlockd's too: the CLI links no MCP.
	if out, code := run(t, filepath.Join(dir, "airlock"), "--socket", filepath.Join(t.TempDir(), "none.sock"), "mcp"); code != 1 || !strings.Contains(out, "airlockd") {
		t.Errorf("mcp without airlockd: exit %d, %q; want exit 1 naming airlockd", code, out)
	}
	if out, code := run(t, filepath.Join(dir, "airlock"), "agent", "--workdir", "/"); code != 1 || !strings.Contains(out, "airlock-agent") {
		t.Errorf("agent without airlock-agent: exit %d, %q; want exit 1 naming airlock-agent", code, out)
	}
	for _, verb := range []string{"serve", "agent"} {
		if out, code := run(t, filepath.Join(dir, "airlock"), verb, "--help"); code != 0 || !strings.Contains(out, "usage: airlock "+verb) {
			t.Errorf("%s --help without its binary: exit %d, %q; want the usage", verb, code, out)
		}
	}
}
