package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestUntrustedRuncOnPath: a runc that the daemon would find on its PATH in a directory
// another user may write is refused at start, before anything runs it.
func TestUntrustedRuncOnPath(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, cgroup := daemonDir(t, "path-")
	t.Cleanup(func() { secret.Unmount(filepath.Join(dir, "secrets")) })
	userBin := filepath.Join(dir, "userbin")
	ran := filepath.Join(dir, "ran")
	if err := os.Mkdir(userBin, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(userBin, "runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{userBin, fake} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, dir, cgroup)
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Env = append(os.Environ(), "PATH="+userBin+":/usr/sbin:/usr/bin:/sbin:/bin")
	done := make(chan struct{})
	time.AfterFunc(time.Minute, func() {
		select {
		case <-done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
		}
	})
	out, err := cmd.CombinedOutput()
	close(done)
	if err == nil || !strings.Contains(string(out), "runc found on PATH") || !strings.Contains(string(out), "owned by uid 65534") {
		t.Errorf("a daemon with a user's runc first on its PATH: %v\n%s\nwant it refused, naming the runc", err, out)
	}
	if _, err := os.Lstat(ran); err == nil {
		t.Errorf("the daemon ran the user's runc")
	}
}
