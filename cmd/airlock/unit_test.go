package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceUnit: the systemd unit make install-service installs is one systemd
// accepts, starting this binary with serve.
func TestServiceUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "dist", "airlock.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/airlock serve\n") || !strings.Contains(string(unit), "KillMode=process\n") {
		t.Fatalf("the unit must start /usr/local/bin/airlock serve and leave sandboxes running on stop:\n%s", unit)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/airlock", self)), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify also complains about units on this machine that the file does not touch.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "airlock.service") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	if err != nil && len(out) == 0 {
		t.Errorf("systemd-analyze verify: %v", err)
	}
}
