package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// ownAddr prints the sandbox's own IPv4 address, as its network stack sees it.
const ownAddr = `python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])'`

// countingSession starts a Python session in sb whose counter n is at 41.
func countingSession(t *testing.T, n *testenv.Node, ref string) string {
	t.Helper()
	ses, err := n.Client.StartSession(background, ref, api.SessionRequest{Kind: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := n.Client.Send(background, ref, ses.ID, "n = 41"); err != nil || res.State != api.ExecSucceeded {
		t.Fatalf("send: %+v, %v", res, err)
	}
	return ses.ID
}

// step adds by to the session's counter in ref and returns what it prints.
func step(t *testing.T, n *testenv.Node, ref, ses, by string) string {
	t.Helper()
	res, err := n.Client.Send(background, ref, ses, "n += "+by+"; n")
	if err != nil {
		t.Fatalf("send to %s: %v", ref, err)
	}
	return strings.TrimSpace(res.Stdout)
}

// TestMemorySnapshotFork checks snapshots and forks that keep memory under runsc: a
// snapshot taken with --memory lists its memory image's size and checksums, which are
// verified before a fork (a changed image is refused as corrupt); a sandbox forked
// from it continues a Python session's counter from the snapshot's value, and so does a
// sandbox restored from it once resumed; three clones forked from one point each
// continue it from the same value and then diverge, each with its own name, id,
// address and session credential; snapshot rm removes the memory image.
func TestMemorySnapshotFork(t *testing.T) {
	runscStage(t)
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc", Network: true})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "src", Network: &api.NetworkPolicy{Mode: "deny_all"}})
	ses := countingSession(t, n, sb.Name)
	srcAddr := mustRun(t, n, sb.Name, ownAddr)

	resp, err := n.Client.SnapshotWith(background, sb.Name, api.SnapshotRequest{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	snap := resp.Snapshot
	if snap.Memory == nil || snap.Memory.Bytes <= 0 || len(snap.Memory.Files) == 0 {
		t.Fatalf("a snapshot with --memory lists memory %+v; want its image's size and files", snap.Memory)
	}
	for _, f := range snap.Memory.Files {
		if len(f.SHA256) != 64 {
			t.Errorf("memory file %+v has no checksum", f)
		}
	}
	imgDir := filepath.Join(n.Dir, "memory", snap.ID)
	if _, err := os.Stat(imgDir); err != nil {
		t.Fatalf("the memory image of %s: %v", snap.ID, err)
	}
	if got := step(t, n, sb.Name, ses, "100"); got != "141" {
		t.Fatalf("the source after its snapshot counts %q; want 141 (it runs on)", got)
	}

	t.Run("a fork continues from the snapshot", func(t *testing.T) {
		f, err := n.Client.Fork(background, snap.ID, api.ForkRequest{Name: "from-snap"})
		if err != nil {
			t.Fatal(err)
		}
		if got := step(t, n, f.Sandbox.Name, ses, "1"); got != "42" {
			t.Errorf("the fork of the memory snapshot counts %q; want 42 (41 at the snapshot, plus 1)", got)
		}
	})

	t.Run("three clones from one point", func(t *testing.T) {
		ids, addrs := map[string]bool{sb.ID: true}, map[string]bool{srcAddr: true}
		tokens := map[string]bool{mustRun(t, n, sb.Name, "cat /run/airlock/session/token"): true}
		for i, name := range []string{"clone-1", "clone-2", "clone-3"} {
			f, err := n.Client.Fork(background, snap.ID, api.ForkRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			c := f.Sandbox
			if c.Name != name || ids[c.ID] {
				t.Errorf("clone %s: name %q id %s; want its own", name, c.Name, c.ID)
			}
			ids[c.ID] = true
			if got := step(t, n, name, ses, "0"); got != "41" {
				t.Errorf("clone %s counts %q; want 41, the snapshot's value", name, got)
			}
			by := []string{"1", "2", "3"}[i]
			if got, want := step(t, n, name, ses, by), []string{"42", "43", "44"}[i]; got != want {
				t.Errorf("clone %s after += %s counts %q; want %s", name, by, got, want)
			}
			addr := mustRun(t, n, name, ownAddr)
			if addrs[addr] {
				t.Errorf("clone %s has address %q, which another sandbox of the fork has", name, addr)
			}
			addrs[addr] = true
			if tok := mustRun(t, n, name, "cat /run/airlock/session/token"); tok == "" || tokens[tok] {
				t.Errorf("clone %s reads session credential %q, empty or another sandbox's", name, tok)
			} else {
				tokens[tok] = true
			}
		}
		// The clones diverged: each holds its own value.
		for i, name := range []string{"clone-1", "clone-2", "clone-3"} {
			if got, want := step(t, n, name, ses, "0"), []string{"42", "43", "44"}[i]; got != want {
				t.Errorf("clone %s counts %q; want %s", name, got, want)
			}
		}
	})

	t.Run("a live fork runs on from the source's point", func(t *testing.T) {
		f, err := n.Client.Fork(background, sb.Name, api.ForkRequest{Name: "live"})
		if err != nil {
			t.Fatal(err)
		}
		if got := step(t, n, f.Sandbox.Name, ses, "1"); got != "142" {
			t.Errorf("a fork of the running source counts %q; want 142", got)
		}
		if got := step(t, n, sb.Name, ses, "0"); got != "141" {
			t.Errorf("the source after a fork counts %q; want 141", got)
		}
	})

	t.Run("a restore brings the snapshot's processes back at resume", func(t *testing.T) {
		if _, err := n.Client.Suspend(background, "clone-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Restore(background, "clone-1", api.RestoreRequest{Snapshot: snap.ID, NoSafetySnapshot: true}); err != nil {
			t.Fatal(err)
		}
		if got := step(t, n, "clone-1", ses, "0"); got != "41" {
			t.Errorf("clone-1 restored from the memory snapshot counts %q after resume; want 41", got)
		}
	})

	t.Run("a changed memory image is refused", func(t *testing.T) {
		pages := filepath.Join(imgDir, snap.Memory.Files[0].Name)
		b, err := os.ReadFile(pages)
		if err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(pages, b, 0o600)
		c := append([]byte(nil), b...)
		c[len(c)/2] ^= 0xff
		if err := os.WriteFile(pages, c, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = n.Client.Fork(background, snap.ID, api.ForkRequest{Name: "corrupt"})
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != "failed_precondition" || !strings.Contains(ae.Message, "checksum") {
			t.Errorf("fork of a snapshot whose memory image changed: %v; want failed_precondition naming the checksum", err)
		}
	})

	t.Run("snapshot rm removes the memory image", func(t *testing.T) {
		for _, name := range []string{"from-snap", "clone-1", "clone-2", "clone-3"} {
			if _, err := n.Client.Terminate(background, name); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Client.DeleteSnapshot(background, snap.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(imgDir); !os.IsNotExist(err) {
			t.Errorf("after snapshot rm, its memory image: %v; want it gone", err)
		}
	})
}

// TestMemorySnapshotSecret checks that a sandbox with a secret delivered by value has
// its memory snapshot refused with the reason, and its fork keeps files only, saying
// why; a memory image never holds a secret's value.
func TestMemorySnapshotSecret(t *testing.T) {
	runscStage(t)
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc"})
	if _, err := n.Client.CreateSecret(background, api.CreateSecretRequest{Name: "tok", Type: "token", Value: "s3cret-value"}); err != nil {
		t.Fatal(err)
	}
	sb := n.Create(t, api.CreateSandboxRequest{Name: "sec"})
	if _, err := n.Client.BindSecret(background, "tok", api.BindSecretRequest{Sandbox: sb.Name, Target: "TOK", Delivery: "env"}); err != nil {
		t.Fatal(err)
	}
	_, err := n.Client.SnapshotWith(background, sb.Name, api.SnapshotRequest{Memory: true})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Code != "failed_precondition" || !strings.Contains(ae.Message, "by value") {
		t.Fatalf("a memory snapshot of a sandbox with an env secret: %v; want failed_precondition saying a secret is delivered by value", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(n.Dir, "memory")); len(entries) != 0 {
		t.Errorf("a refused memory snapshot left %d memory images", len(entries))
	}
	f, err := n.Client.Fork(background, sb.Name, api.ForkRequest{Name: "sec-fork"})
	if err != nil {
		t.Fatal(err)
	}
	_, reasons, _ := eventTypes(t, n, f.Sandbox.Name, 0)
	if !strings.Contains(reasons["memory_not_kept"], "by value") {
		t.Errorf("the fork's events say memory_not_kept %q; want the secret's reason", reasons["memory_not_kept"])
	}
}

// TestForkRuncFilesOnly checks that under runc a fork keeps files only and says so
// (memory_not_kept, naming the runtime), and that a memory snapshot is refused with
// the reason, leaving no image.
func TestForkRuncFilesOnly(t *testing.T) {
	n := testenv.NewNode(t, testenv.Options{})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "plain"})
	mustRun(t, n, sb.Name, "echo kept > /root/f")
	f, err := n.Client.Fork(background, sb.Name, api.ForkRequest{Name: "plain-fork"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, n, f.Sandbox.Name, "cat /root/f"); out != "kept\n" {
		t.Errorf("the fork's file: %q; want kept", out)
	}
	if _, reasons, _ := eventTypes(t, n, f.Sandbox.Name, 0); !strings.Contains(reasons["memory_not_kept"], "runc") {
		t.Errorf("the fork's events: memory_not_kept %q; want it naming runc", reasons["memory_not_kept"])
	}
	_, err = n.Client.SnapshotWith(background, sb.Name, api.SnapshotRequest{Memory: true})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Code != "failed_precondition" || !strings.Contains(ae.Message, "only runsc") {
		t.Errorf("a memory snapshot under runc: %v; want failed_precondition saying only runsc can", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(n.Dir, "memory")); len(entries) != 0 {
		t.Errorf("a refused memory snapshot left %d memory images", len(entries))
	}
}

// TestMemoryForkCount checks airlock fork --count under runsc: three sandboxes named
// NEW-1 … NEW-3, each continuing a Python session's counter from the one point the
// source was at, through one memory snapshot the CLI lists with its memory's size.
func TestMemoryForkCount(t *testing.T) {
	runscStage(t)
	d := startDaemon(t)
	cl, err := client.New(client.Options{Socket: d.socket})
	if err != nil {
		t.Fatal(err)
	}
	d.must("create", "src")
	ses, err := cl.StartSession(background, "src", api.SessionRequest{Kind: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cl.Send(background, "src", ses.ID, "n = 41"); err != nil || res.State != api.ExecSucceeded {
		t.Fatalf("send: %+v, %v", res, err)
	}
	out := d.must("fork", "src", "c", "--count", "3")
	for i, name := range []string{"c-1", "c-2", "c-3"} {
		if !strings.Contains(out, name) {
			t.Errorf("fork --count 3 printed %q; want %s in it", out, name)
		}
		res, err := cl.Send(background, name, ses.ID, "n += "+[]string{"1", "2", "3"}[i]+"; n")
		if want := []string{"42\n", "43\n", "44\n"}[i]; err != nil || res.Stdout != want {
			t.Errorf("clone %s: %+v, %v; want %s", name, res, err, want)
		}
	}
	ls := d.must("snapshot", "ls", "src")
	if !strings.Contains(ls, "MEMORY") || strings.Contains(strings.Split(ls, "\n")[1], " - ") {
		t.Errorf("snapshot ls after fork --count: %q; want the fork point listed with its memory's size", ls)
	}
	if _, stderr, code := d.airlock("fork", "src", "c", "--count", "0"); code == 0 || !strings.Contains(stderr, "--count") {
		t.Errorf("fork --count 0: exit %d, %q; want a usage error naming --count", code, stderr)
	}
}
