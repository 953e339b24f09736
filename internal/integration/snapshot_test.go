package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestSnapshotRestoreFork covers snapshots of running and suspended sandboxes,
// content-addressed storage, restore with its checks, fork from a snapshot and from a
// live sandbox, and the refusals that leave everything as it was.
func TestSnapshotRestoreFork(t *testing.T) {
	n := testenv.NewNode(t)
	sb := n.Create(t, api.CreateSandboxRequest{Name: "snap-src"})
	mustRun(t, n, sb.Name, "head -c 20M /dev/urandom > /root/big && echo v1 > /root/version && mkdir -p /home/user/d && echo hi > /home/user/d/f && rm /etc/hostname")

	first, err := n.Client.Snapshot(background, sb.Name, map[string]string{"step": "one"})
	if err != nil {
		t.Fatal(err)
	}
	s1 := first.Snapshot
	if s1.State != "ready" || s1.Consistency != "crash-consistent" || s1.ImageDigest != sb.ImageDigest {
		t.Errorf("snapshot of a running sandbox = %+v; want ready, crash-consistent, on the sandbox's image", s1)
	}
	if s1.LogicalSize < 20<<20 {
		t.Errorf("logical size %d; want at least the 20 MiB file", s1.LogicalSize)
	}
	// The sandbox keeps running after the freeze.
	mustRun(t, n, sb.Name, "head -c 1M /dev/urandom | dd of=/root/big bs=1M seek=5 conv=notrunc 2>/dev/null; echo v2 > /root/version")
	second, err := n.Client.Snapshot(background, sb.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Snapshot.StoredSize; got > 2<<20 {
		t.Errorf("a second snapshot after a 1 MiB change stored %d bytes; want at most 2 MiB", got)
	}
	got, err := n.Client.GetSnapshot(background, s1.ID)
	if err != nil || len(got.Chunks) == 0 {
		t.Fatalf("get snapshot: %v, %d chunks", err, len(got.Chunks))
	}

	// Restore needs a suspended sandbox.
	_, err = n.Client.Restore(background, sb.Name, api.RestoreRequest{Snapshot: s1.ID})
	wantAPIError(t, "restore into a running sandbox", err, 409, "failed_precondition")
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	resp, err := n.Client.Restore(background, sb.Name, api.RestoreRequest{Snapshot: s1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Sandbox.Parent != s1.ID {
		t.Errorf("lineage after restore: parent %q; want %s", resp.Sandbox.Parent, s1.ID)
	}
	if out := mustRun(t, n, sb.Name, "cat /root/version /home/user/d/f; test -e /etc/hostname && echo back || echo deleted"); out != "v1\nhi\ndeleted\n" {
		t.Errorf("after restore: %q; want the first snapshot's files (whiteouts kept)", out)
	}
	list, _ := n.Client.Snapshots(background, sb.Name)
	if len(list) != 3 {
		t.Errorf("snapshots of the sandbox = %d; want 3 (two taken, one safety copy)", len(list))
	}

	// Fork from a snapshot and from a live sandbox: independent writable layers.
	f1, err := n.Client.Fork(background, s1.ID, api.ForkRequest{Name: "snap-fork1"})
	if err != nil {
		t.Fatal(err)
	}
	if f1.Sandbox.Parent != s1.ID || f1.Sandbox.ForkedFrom != sb.ID {
		t.Errorf("fork lineage = parent %q from %q; want %s from %s", f1.Sandbox.Parent, f1.Sandbox.ForkedFrom, s1.ID, sb.ID)
	}
	f2, err := n.Client.Fork(background, sb.Name, api.ForkRequest{Name: "snap-fork2"})
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, n, f1.Sandbox.Name, "echo fork1 > /root/version")
	for name, want := range map[string]string{sb.Name: "v1\n", f1.Sandbox.Name: "fork1\n", f2.Sandbox.Name: "v1\n"} {
		if out := mustRun(t, n, name, "cat /root/version"); out != want {
			t.Errorf("%s: /root/version = %q; want %q (no shared writable storage)", name, out, want)
		}
	}
	if out := mustRun(t, n, f2.Sandbox.Name, "stat -c %u:%g /home/user/d/f"); out != "0:0\n" {
		t.Errorf("owner in the fork = %q; want 0:0 (ids shifted into the fork's range)", out)
	}

	// Delete is refused while a live sandbox comes from the snapshot.
	err = n.Client.DeleteSnapshot(background, s1.ID)
	wantAPIError(t, "delete a snapshot a sandbox depends on", err, 409, "failed_precondition")

	// A snapshot whose chunks fail their checksum is refused and changes nothing.
	chunk := strings.TrimPrefix(got.Chunks[0], "sha256:")
	path := filepath.Join(n.Dir, "snapshots", "chunks", chunk[:2], chunk)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read chunk: %v", err)
	}
	data[0] ^= 0xff
	os.WriteFile(path, data, 0o600)
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	_, err = n.Client.Restore(background, sb.Name, api.RestoreRequest{Snapshot: s1.ID, NoSafetySnapshot: true})
	wantAPIError(t, "restore of a corrupt snapshot", err, 409, "failed_precondition")
	if out := mustRun(t, n, sb.Name, "cat /root/version"); out != "v1\n" {
		t.Errorf("after a refused restore /root/version = %q; want it unchanged", out)
	}
	_, err = n.Client.Fork(background, s1.ID, api.ForkRequest{Name: "snap-fork3"})
	wantAPIError(t, "fork of a corrupt snapshot", err, 409, "failed_precondition")
	if _, err := n.Client.Get(background, "snap-fork3"); err == nil {
		t.Errorf("a refused fork left a sandbox behind")
	}
}
