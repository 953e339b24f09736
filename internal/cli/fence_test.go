package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/fence"
)

// The test binary is its own fence child, as cmd/airlock's main is.
func init() {
	if len(os.Args) > 1 && os.Args[1] == fence.ChildCommand {
		os.Exit(fence.ChildMain(os.Args[2:], os.Stderr))
	}
}

func runFenceCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(bg, append([]string{"fence"}, args...), strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestFenceUsage(t *testing.T) {
	root := t.TempDir()
	home, ws := filepath.Join(root, "home"), filepath.Join(root, "ws")
	for _, d := range []string{home, ws} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	marker := filepath.Join(ws, "ran")
	touch := []string{"--", "touch", marker}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a missing workspace", append([]string{"--workspace", filepath.Join(root, "missing")}, touch...), "does not exist"},
		{"the home as workspace", append([]string{"--workspace", home}, touch...), "home directory"},
		{"/ as workspace", append([]string{"--workspace", "/"}, touch...), "may not be /"},
		{"an unknown access", append([]string{"--workspace", ws, "--access", "all"}, touch...), "--access must be none, ro or rw"},
		{"no command", []string{"--workspace", ws, "--"}, "missing the command"},
		{"no command nor --", []string{"--workspace", ws}, "missing the command"},
		{"an unknown flag", append([]string{"--workspace", ws, "--net"}, touch...), "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runFenceCLI(t, tt.args...)
			wantExit(t, err, 2)
			wantContains(t, "stderr", stderr, tt.want, "usage: airlock fence")
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the command ran: %s exists", marker)
			}
		})
	}
}

func TestFenceRuns(t *testing.T) {
	ws := t.TempDir()
	if _, _, err := runFenceCLI(t, "--workspace", ws, "--", "true"); err != nil {
		if os.Getenv("CI") != "true" {
			t.Skipf("no fence on this host: %v", err)
		}
	}
	stdout, stderr, err := runFenceCLI(t, "--workspace", ws, "--no-network", "--", "sh", "-c", `echo "$PWD"; echo oops >&2; echo x > out; exit 3`)
	wantExit(t, err, 3)
	if got := strings.TrimSpace(stdout); got != ws {
		t.Errorf("stdout = %q, want the workspace %q as working directory", got, ws)
	}
	if stderr != "oops\n" {
		t.Errorf("stderr = %q, want the command's", stderr)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "x\n" {
		t.Errorf("workspace out = %q, %v; want the command's write", b, err)
	}
	_, _, err = runFenceCLI(t, "--workspace", ws, "--access", "ro", "--", "sh", "-c", "echo x > out2")
	wantExit(t, err, 2) // sh: cannot create out2
	_, _, err = runFenceCLI(t, "--workspace", ws, "--", "airlock-no-such-command")
	wantExit(t, err, fence.ExitNotFound)
}
