package integration

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestGCStateDir kills a daemon with SIGKILL while a networked sandbox with a secrets
// tmpfs runs, and has `airlock gc --state-dir` clean up after it: refused while the
// daemon lives, a dry run that lists and removes nothing, then nothing left on the host.
func TestGCStateDir(t *testing.T) {
	d := startDaemon(t)
	d.must("create", "left")
	id := d.get("left").ID
	state := filepath.Join(d.dir, "state")

	if _, errOut, code := d.airlock("gc", "--state-dir", state); code != 1 || !strings.Contains(errOut, "running daemon") {
		t.Errorf("gc --state-dir of a live daemon's directory: exit %d, stderr %q; want 1 and a running daemon named", code, errOut)
	}
	if c := d.runcContainers(); len(c) != 1 {
		t.Fatalf("after a refused gc --state-dir, containers = %v; want the sandbox still running", c)
	}

	d.stop(syscall.SIGKILL)
	var dry struct {
		DryRun bool         `json:"dry_run"`
		Items  []sweep.Item `json:"items"`
	}
	if err := json.Unmarshal([]byte(d.must("gc", "--state-dir", state, "--dry-run", "-o", "json")), &dry); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, it := range dry.Items {
		kinds[it.Kind] = true
		if it.Kind == sweep.KindContainer && it.Name != "airlock-"+id {
			t.Errorf("dry run lists container %q; want only airlock-%s", it.Name, id)
		}
	}
	for _, k := range []string{sweep.KindContainer, sweep.KindProcess, sweep.KindMount, sweep.KindCgroup, sweep.KindTable, sweep.KindVeth} {
		if !kinds[k] {
			t.Errorf("dry run lists no %s: %+v", k, dry.Items)
		}
	}
	if c := d.runcContainers(); !dry.DryRun || len(c) != 1 {
		t.Fatalf("after a dry run (dry_run %v), containers = %v; want the sandbox untouched", dry.DryRun, c)
	}

	out := d.must("gc", "--state-dir", state)
	if !strings.Contains(out, "removed container airlock-"+id) {
		t.Errorf("gc --state-dir printed %q; want a line for container airlock-%s", out, id)
	}
	if c := d.runcContainers(); len(c) > 0 {
		t.Errorf("containers left: %v", c)
	}
	if m := testenv.MountsUnder(d.dir); len(m) > 0 {
		t.Errorf("mounts left (sandbox, netns or secrets tmpfs): %v", m)
	}
	for _, cg := range testenv.CgroupDirs(d.cgroup) {
		t.Errorf("cgroup left: %s", cg)
	}
	if err := exec.Command("nft", "list", "table", "inet", d.table()).Run(); err == nil {
		t.Errorf("nftables table inet %s left", d.table())
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "c"+d.cgroup[len(d.cgroup)-4:]) {
			t.Errorf("veth left: %s", i.Name)
		}
	}
	if out := d.must("gc", "--state-dir", state); out != "nothing to remove\n" {
		t.Errorf("a second gc --state-dir printed %q; want nothing to remove", out)
	}
	if _, err := os.Stat(filepath.Join(state, "airlock.db")); err != nil {
		t.Errorf("gc --state-dir removed the store: %v", err)
	}
}
