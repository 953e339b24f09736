package daemon_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestStateDirIsClosedToOtherUsers runs a daemon with a sandbox (with networking, a
// snapshot and an exposed port) and walks its state directory as a host user other than
// root would see it: nothing reachable (every directory above it searchable by others)
// may be readable or writable by group or others but the few files sandboxes read, and
// a sandbox's own directory must not be searchable by others. Loose modes found at start
// are fixed.
func TestStateDirIsClosedToOtherUsers(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, cgroup := daemonDir(t, "ald-")
	tag := fmt.Sprintf("%04x", uint16(time.Now().UnixNano()))
	// Found open from an older daemon or another umask: fixed at start.
	os.Mkdir(filepath.Join(dir, "snapshots"), 0o755)
	os.Chmod(filepath.Join(dir, "snapshots"), 0o755)
	os.WriteFile(filepath.Join(dir, "leftover.json"), []byte("{}"), 0o644)
	os.Chmod(filepath.Join(dir, "leftover.json"), 0o644)
	sockDir, err := os.MkdirTemp("/tmp", "als-") // the socket's place is not the state directory
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	defer secret.Unmount(filepath.Join(sockDir, "secrets")) // the daemon leaves it for sandboxes
	sock := filepath.Join(sockDir, "api.sock")
	cfg := fmt.Sprintf(`state_dir: %s
secrets_dir: %s
socket: %s
cgroup_parent: %s
default_limits: {cpu: 1, memory: 256MiB, pids: 1024, open_files: 65536, disk: 1GiB}
tmpfs_size: 64MiB
log_level: info
network:
  enabled: true
  subnet: 10.212.%d.0/24
  upstream_dns: 127.0.0.1:9
  table: airlock_d%s
  host_prefix: d%s
`, dir, filepath.Join(sockDir, "secrets"), sock, cgroup, time.Now().UnixNano()%250, tag, tag)
	cfgPath := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cl, err := client.New(client.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	daemon := startDaemon(t, bin, cfgPath)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if list, err := cl.List(cctx, client.ListOptions{}); err == nil {
			for _, sb := range list {
				if _, err := cl.Terminate(cctx, sb.ID); err != nil {
					t.Errorf("terminate %s: %v", sb.Name, err)
				}
			}
		}
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
		exec.Command("nft", "delete", "table", "inet", "airlock_d"+tag).Run()
		testenv.RemoveHostLocks("nftables-airlock_d"+tag, "veth-d"+tag)
	})

	resp, err := cl.Create(ctx, api.CreateSandboxRequest{Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Exec(ctx, "p", api.ExecRequest{Shell: "echo secret > /root/x && cat /etc/resolv.conf /etc/ssl/certs/ca-certificates.crt >/dev/null", Timeout: "60s"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if _, err := cl.Snapshot(ctx, "p", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ExposePort(ctx, "p", 8000, false); err != nil {
		t.Fatal(err)
	}

	sandboxDir := filepath.Join("sandboxes", resp.Sandbox.ID)
	// Paths others may read (or, for directories, list), each with why.
	readable := map[string]string{
		"network/ca-bundle.pem":              "public CA certificates every sandbox reads",
		"network/netns/" + resp.Sandbox.ID:   "a network namespace's file (nsfs while mounted, an empty record once the container holds the namespace): opening it grants nothing",
		"bin/airlock":                        "the public agent binary (airlock-agent), which gVisor's kernel reads to load it",
		"network/ca-public/ca-bundle.pem":    "the CA certificates' copy the sandboxes' view shows",
		"network/ca-view/view/ca-bundle.pem": "the view sandboxes bind the CA certificates from",
		"sandboxes-agent/view/airlock":       "the view sandboxes bind the agent binary from",
		"sandboxes-runsc-agent/view/airlock": "the view gVisor sandboxes bind the agent binary from",
	}
	// The sandbox's directory is its own: root's, group the sandbox's gid, 0710.
	idmap, err := cl.Exec(ctx, "p", api.ExecRequest{Shell: "awk '{print $2}' /proc/self/gid_map", Timeout: "60s"})
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.ParseUint(strings.TrimSpace(idmap.Stdout), 10, 32)
	if err != nil {
		t.Fatalf("the sandbox's gid map: %q: %v", idmap.Stdout, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, sandboxDir)); err != nil {
		t.Fatal(err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || uint64(st.Gid) != gid || fi.Mode().Perm() != 0o710 {
		t.Errorf("sandbox directory: uid %d gid %d mode %v, want 0, the sandbox's gid %d, 0710", st.Uid, st.Gid, fi.Mode().Perm(), gid)
	}
	var open []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		perm := fi.Mode().Perm()
		if rel == "." {
			if perm&0o066 != 0 {
				open = append(open, fmt.Sprintf(". %v", perm))
			}
			return nil
		}
		if st.Uid != 0 || st.Gid != 0 {
			// A sandbox's own: fine only if others cannot reach inside it.
			if fi.IsDir() && perm&0o007 != 0 && perm&0o001 != 0 {
				open = append(open, fmt.Sprintf("%s %v (a sandbox's, searchable by others)", rel, perm))
			}
			if fi.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if _, ok := readable[rel]; !ok && perm&0o066 != 0 {
			open = append(open, fmt.Sprintf("%s %v", rel, perm))
		}
		if fi.IsDir() && perm&0o001 == 0 {
			return fs.SkipDir // nothing below is reachable by others
		}
		return nil
	})
	for _, o := range open {
		t.Errorf("readable or writable by other host users: %s", o)
	}
	netDirs, _ := filepath.Glob(filepath.Join(dir, "network", "files", "*"))
	netDirs = slices.DeleteFunc(netDirs, func(p string) bool { fi, err := os.Stat(p); return err == nil && !fi.IsDir() })
	if len(netDirs) != 1 {
		t.Errorf("client files directories: %v; want the sandbox's alone", netDirs)
	}
	for _, netDir := range netDirs {
		if fi, err := os.Stat(netDir); err != nil || fi.Mode().Perm() != 0o710 || fi.Sys().(*syscall.Stat_t).Gid == 0 {
			t.Errorf("the sandbox's client files directory: %v, %v; want 0710, group the sandbox's gid", err, fi)
		}
	}
	// The database, its journal, the CA key and the loosened leftovers are the daemon's alone.
	for _, rel := range []string{"airlock.db", "airlock.db-wal", "airlock.db-shm", "network/ca/ca-key.pem", "leftover.json", "snapshots"} {
		fi, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v; want no access for group or others", rel, fi.Mode().Perm())
		}
	}
}
