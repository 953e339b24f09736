package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestOneDaemonPerStateDirAndSocket: a second daemon on a state directory or a socket
// another serves is refused at start, before its recovery would reconcile the first's
// sandboxes or its listen would take the first's socket away.
func TestOneDaemonPerStateDirAndSocket(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, cgroup := daemonDir(t, "all-")
	var cmds []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range cmds {
			if c.ProcessState == nil {
				c.Process.Signal(syscall.SIGTERM)
				c.Wait()
			}
		}
		for _, s := range []string{"secrets1", "secrets2", "secrets3", "secrets4"} {
			secret.Unmount(filepath.Join(dir, s))
		}
	})
	config := func(n int, state, sock string) string {
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", n))
		cfg := fmt.Sprintf("state_dir: %s\nsecrets_dir: %s\nsocket: %s\ncgroup_parent: %s\nrunsc: \"off\"\nnetwork: {enabled: false}\nlog_level: info\n",
			filepath.Join(dir, state), filepath.Join(dir, fmt.Sprintf("secrets%d", n)), filepath.Join(dir, sock), cgroup)
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := startDaemon(t, bin, config(1, "state", "api.sock"))
	cmds = append(cmds, first)
	for _, tc := range []struct {
		name, state, sock, want string
	}{
		{"the same state directory", "state", "api2.sock", "another daemon (pid " + fmt.Sprint(first.Process.Pid) + ") is using state directory"},
		{"the same socket", "state3", "api.sock", "another daemon (pid " + fmt.Sprint(first.Process.Pid) + ") is using socket"},
		{"the same cgroup parent", "state4", "api4.sock", "another daemon (pid " + fmt.Sprint(first.Process.Pid) + ") is using cgroup parent " + cgroup},
	} {
		n, _ := strconv.Atoi(strings.TrimPrefix(tc.state, "state"))
		n = max(n, 2)
		second := exec.Command(bin, "serve", "--config", config(n, tc.state, tc.sock))
		var out strings.Builder
		second.Stdout, second.Stderr = &out, &out
		if err := second.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, second)
		done := make(chan error, 1)
		go func() { done <- second.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), tc.want) {
				t.Errorf("a second daemon on %s: %v\n%s\nwant it refused: %q", tc.name, err, out.String(), tc.want)
			}
		case <-time.After(30 * time.Second):
			second.Process.Signal(syscall.SIGTERM)
			<-done
			t.Errorf("a second daemon on %s was not refused:\n%s", tc.name, out.String())
		}
	}
	cl, err := client.New(client.Options{Socket: filepath.Join(dir, "api.sock")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.List(ctx, client.ListOptions{}); err != nil {
		t.Errorf("the first daemon no longer answers on its socket: %v", err)
	}
	// A hang-up stops it the clean way: exit status 0, its socket removed.
	first.Process.Signal(syscall.SIGHUP)
	if err := first.Wait(); err != nil {
		t.Errorf("the daemon after SIGHUP: %v; want a clean exit", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "api.sock")); err == nil {
		t.Errorf("the daemon left its socket after SIGHUP")
	}
}
