package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/testenv"
)

// runscStage skips a test of memory kept across suspend outside the runsc stage (make
// test's RUNSC_TESTS, AIRLOCK_TEST_RUNTIME=runsc): runsc's systrap platform keeps cores
// busy, so its tests run after the rest, never beside them.
func runscStage(t *testing.T) {
	t.Helper()
	if os.Getenv("AIRLOCK_TEST_RUNTIME") != "runsc" {
		t.Skip("runs in the runsc stage: AIRLOCK_TEST_RUNTIME=runsc (make test's RUNSC_TESTS)")
	}
}

// eventTypes lists the types of sb's events after seq, with their data's reason.
func eventTypes(t *testing.T, n *testenv.Node, ref string, after int64) (types []string, reasons map[string]string, last int64) {
	t.Helper()
	evs, err := n.Client.Events(background, ref, after)
	if err != nil {
		t.Fatal(err)
	}
	reasons = map[string]string{}
	last = after
	for _, ev := range evs {
		types = append(types, ev.Type)
		if r, ok := ev.Data["reason"].(string); ok {
			reasons[ev.Type] = r
		}
		last = max(last, ev.Seq)
	}
	return types, reasons, last
}

// fetch sets FETCH to a Python program that prints the sandbox's own server's page
// (port 8123), past the egress proxy's variables.
const fetch = `FETCH='import urllib.request as u; print(u.build_opener(u.ProxyHandler({})).open("http://127.0.0.1:8123/index.html", timeout=10).read().decode(), end="")'
`

// TestMemorySuspend checks suspend that keeps memory under runsc: a Python session's
// variables, a server started before the suspend (a new connection after resume), a
// file written just before it, a tmpfs file and a background process's working
// directory and environment all come back; the generation grows by one and events say
// the memory was kept and restored.
func TestMemorySuspend(t *testing.T) {
	runscStage(t)
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc", Network: true})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "mem", Network: &api.NetworkPolicy{Mode: "deny_all"}})
	ses, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := n.Client.Send(background, sb.Name, ses.ID, "x = 41; blob = bytearray(range(256)) * (32 << 10)"); err != nil || res.State != api.ExecSucceeded {
		t.Fatalf("send: %+v, %v", res, err)
	}
	mustRun(t, n, sb.Name, fetch+`set -e
mkdir -p /root/www && cd /root/www && echo served > index.html
MEMVAR=kept-env nohup python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &
echo $! > /root/server.pid
for i in $(seq 50); do python3 -c "$FETCH" 2>/dev/null && break; sleep 0.1; done
python3 -c "$FETCH"
echo in-tmpfs > /tmp/t; echo just-before > /root/f`)
	_, _, seq := eventTypes(t, n, sb.Name, 0)
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	got, err := n.Client.Get(background, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Persistence == nil || !got.Persistence.MemoryKept {
		t.Errorf("the suspended sandbox's record says persistence %+v; want its memory kept", got.Persistence)
	}
	res, err := n.Client.Resume(background, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Generation != sb.Generation+1 {
		t.Errorf("generation after resume = %d; want %d", res.Sandbox.Generation, sb.Generation+1)
	}
	types, reasons, _ := eventTypes(t, n, sb.Name, seq)
	for _, want := range []string{"memory_kept", "memory_restored"} {
		if !strings.Contains(strings.Join(types, " "), want) {
			t.Errorf("events after suspend and resume: %v (%v); want %s", types, reasons, want)
		}
	}

	t.Run("python variables", func(t *testing.T) {
		// Every page of the blob comes back with its bytes.
		res, err := n.Client.Send(background, sb.Name, ses.ID, "x + 1, len(blob), blob.count(255), blob == bytearray(range(256)) * (32 << 10)")
		if err != nil || res.Stdout != "(42, 8388608, 32768, True)\n" {
			t.Errorf("send after resume: %+v, %v; want (42, 8388608, 32768, True)", res, err)
		}
	})
	t.Run("server answers a new connection", func(t *testing.T) {
		res := run(t, n, sb.Name, fetch+`python3 -c "$FETCH"`)
		if out := res.Stdout; out != "served\n" {
			t.Errorf("the server after resume answered %q; want served", out)
		}
	})
	t.Run("files, tmpfs, directory and environment", func(t *testing.T) {
		out := mustRun(t, n, sb.Name, `cat /root/f /tmp/t; p=$(cat /root/server.pid); readlink /proc/$p/cwd; tr '\0' '\n' < /proc/$p/environ | grep ^MEMVAR=`)
		if want := "just-before\nin-tmpfs\n/root/www\nMEMVAR=kept-env\n"; out != want {
			t.Errorf("after resume: %q; want %q", out, want)
		}
	})
	t.Run("the next suspend saves again", func(t *testing.T) {
		if _, err := n.Client.Suspend(background, sb.Name); err != nil {
			t.Fatal(err)
		}
		if res, err := n.Client.Send(background, sb.Name, ses.ID, "x"); err != nil || res.Stdout != "41\n" {
			t.Errorf("send after a second suspend (resumed by the call): %+v, %v; want 41", res, err)
		}
	})
	t.Run("memory pages that fail to load leave the files, and the sandbox runs again", func(t *testing.T) {
		if _, err := n.Client.Suspend(background, sb.Name); err != nil {
			t.Fatal(err)
		}
		// A short pages file fails the restore (a fresh start); were the sandbox to end
		// after it (a page read that fails late), the next call would find it
		// suspended with its files and resume it afresh. Either way the files are there.
		pages := filepath.Join(n.Dir, "memory", sb.ID, "pages.img")
		fi, err := os.Stat(pages)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(pages, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Resume(background, sb.Name); err != nil {
			t.Fatalf("a resume whose memory pages cannot be loaded failed: %v", err)
		}
		var out string
		for i := 0; i < 3; i++ {
			res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Shell: "cat /root/f"})
			if err == nil && res.State == api.ExecSucceeded {
				out = res.Stdout
				break
			}
		}
		if out != "just-before\n" {
			t.Errorf("after memory pages that failed to load: %q; want the file", out)
		}
		if got, err := n.Client.Get(background, sb.Name); err != nil || got.State != api.StateRunning {
			t.Errorf("the sandbox after a failed load: %+v, %v; want running", got, err)
		}
	})
	t.Run("a restore that fails starts afresh, with its network", func(t *testing.T) {
		if _, err := n.Client.Suspend(background, sb.Name); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(n.Dir, "memory", sb.ID, "checkpoint.img"), 100); err != nil {
			t.Fatal(err)
		}
		_, _, seq := eventTypes(t, n, sb.Name, 0)
		if _, err := n.Client.Resume(background, sb.Name); err != nil {
			t.Fatalf("a resume whose memory cannot be restored failed: %v", err)
		}
		if types, reasons, _ := eventTypes(t, n, sb.Name, seq); reasons["memory_not_restored"] == "" {
			t.Errorf("events %v; want memory_not_restored with a reason", types)
		}
		out := mustRun(t, n, sb.Name, "cat /root/f; pgrep -c python3 || true; grep -c eth0 /proc/net/route")
		if out != "just-before\n0\n2\n" {
			t.Errorf("after a failed restore: %q; want the file, no process, eth0's two routes", out)
		}
	})
}

// TestMemorySuspendFallsBack checks that a suspend whose memory cannot be saved (here
// the node's disk for memory images is full) keeps the sandbox's files, says why in an
// event and in the record, and that its resume starts it afresh.
func TestMemorySuspendFallsBack(t *testing.T) {
	runscStage(t)
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc"})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "memfull"})
	mustRun(t, n, sb.Name, "echo kept > /root/f; (sleep 1000 &) ; python3 -c 'open(\"/tmp/big\",\"wb\").write(bytes(range(256))*(64<<12))'")
	full := filepath.Join(n.Dir, "memory")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(full, unix.MNT_DETACH) })
	_, _, seq := eventTypes(t, n, sb.Name, 0)
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatalf("a suspend whose memory cannot be saved failed: %v", err)
	}
	got, err := n.Client.Get(background, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateSuspended || got.Persistence == nil || got.Persistence.MemoryKept {
		t.Errorf("after the failed save: state %s, persistence %+v; want suspended, memory not kept", got.State, got.Persistence)
	}
	types, reasons, _ := eventTypes(t, n, sb.Name, seq)
	if !strings.Contains(reasons["memory_not_kept"], "disk is full") {
		t.Errorf("events %v, reasons %v; want memory_not_kept saying the disk is full", types, reasons)
	}
	if entries, _ := os.ReadDir(full); len(entries) > 0 {
		t.Errorf("the failed save left %d entries in the memory directory", len(entries))
	}
	if out := mustRun(t, n, sb.Name, "cat /root/f; pgrep -c sleep || true; ls /tmp"); out != "kept\n0\n" {
		t.Errorf("after a files-only suspend and resume: %q; want the file kept, no process, tmpfs empty", out)
	}
}

// TestMemoryCrash kills the daemon in the middle of a suspend that saves memory and of
// a resume that restores it: after a restart each sandbox is running or suspended, its
// record says whether its memory is kept, a kept memory is restored by the next resume,
// and no image is left that no record names.
func TestMemoryCrash(t *testing.T) {
	runscStage(t)
	d := startDaemon(t) // on runsc: the stage's default
	memDir := filepath.Join(d.dir, "state", "memory")
	for _, step := range []struct {
		point, verb string
		kept        bool // memory kept after recovery
	}{
		{"sandbox.checkpoint-begin", "suspend", true}, // recovery saves it
		{"sandbox.checkpoint-saved", "suspend", false},
		{"sandbox.restore-done", "resume", false},
	} {
		name := strings.ReplaceAll(step.point, ".", "-")
		d.env = nil
		d.stop(syscall.SIGTERM)
		d.start()
		d.must("create", name)
		d.must("exec", name, "--", "sh", "-c", "(sleep 1000 >/dev/null 2>&1 &); echo x > /tmp/t")
		if step.verb == "resume" {
			d.must("suspend", name)
			if sb := d.get(name); sb.Persistence == nil || !sb.Persistence.MemoryKept {
				t.Fatalf("%s: the suspend kept no memory: %+v", step.point, sb.Persistence)
			}
		}
		d.env = []string{failpoint.EnvVar + "=" + step.point}
		d.stop(syscall.SIGTERM)
		d.start()
		if _, errOut, code := d.airlock(step.verb, name); code == 0 || !d.killed(30*time.Second) {
			t.Fatalf("%s: the daemon was not killed at the point (%s said %d: %s)", step.point, step.verb, code, errOut)
		}
		d.env = nil
		d.start()
		sb := d.get(name)
		if sb.State != api.StateSuspended {
			t.Errorf("%s: after recovery the sandbox is %s; want suspended", step.point, sb.State)
		}
		kept := sb.Persistence != nil && sb.Persistence.MemoryKept
		if kept != step.kept {
			t.Errorf("%s: after recovery memory kept = %v; want %v", step.point, kept, step.kept)
		}
		_, statErr := os.Stat(filepath.Join(memDir, sb.ID))
		if entries, _ := os.ReadDir(memDir); len(entries) != btoi(kept) || (kept && statErr != nil) {
			t.Errorf("%s: the memory directory holds %d entries; want only the kept sandbox's image", step.point, len(entries))
		}
		want := "0\n"
		if kept {
			want = "1\nx\n"
		}
		if out := d.must("exec", name, "--", "sh", "-c", "pgrep -c sleep; cat /tmp/t 2>/dev/null; true"); out != want {
			t.Errorf("%s: after the next resume: %q; want %q", step.point, out, want)
		}
		d.must("rm", name)
	}
	if err := retry(10*time.Second, func() error { // the last terminate's cleanup runs after it
		if out := d.must("gc", "--dry-run"); !strings.Contains(out, "nothing to remove") {
			return fmt.Errorf("gc --dry-run after recovery: %q; want nothing to remove", out)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestMemorySecrets checks that a memory image never holds a secret's value: a proxy
// delivery's placeholder, which a process keeps in memory, is all there is (the image
// is scanned for the value in the clear, in base64 and in hex), and a sandbox with a
// secret delivered by value (env) suspends with its files only, saying why; the value
// is delivered again after the resume.
func TestMemorySecrets(t *testing.T) {
	runscStage(t)
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Runtime: "runsc", Network: true})
	proxied, byValue := secretValue("ghp_"), secretValue("sk-")
	for name, v := range map[string]string{"memtok": proxied, "memkey": byValue} {
		if _, err := n.Client.CreateSecret(background, api.CreateSecretRequest{Name: name, Type: "token",
			AllowedHosts: []string{"api.example.test"}, Value: v + "\n"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Client.DeleteSecret(background, name) })
	}
	sb := n.Create(t, api.CreateSandboxRequest{Name: "memsec", Network: &api.NetworkPolicy{Mode: "deny_all"}})
	if _, err := n.Client.BindSecret(background, "memtok", api.BindSecretRequest{Sandbox: sb.Name, Target: "TOK"}); err != nil {
		t.Fatal(err)
	}
	ses, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := n.Client.Send(background, sb.Name, ses.ID, "import os; tok = os.environ['TOK'] * 1000"); err != nil || res.State != api.ExecSucceeded {
		t.Fatalf("send: %+v, %v", res, err)
	}
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(n.Dir, "memory", sb.ID)
	var scanned int64
	filepath.WalkDir(image, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
			return nil
		}
		scanned += int64(len(data))
		for form, v := range map[string]string{"clear": proxied, "base64": base64.StdEncoding.EncodeToString([]byte(proxied)), "hex": hex.EncodeToString([]byte(proxied))} {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("the memory image's %s holds the secret's value (%s)", filepath.Base(p), form)
			}
		}
		return nil
	})
	if scanned == 0 {
		t.Fatalf("no memory image at %s to scan", image)
	}
	if res, err := n.Client.Send(background, sb.Name, ses.ID, "print(tok == os.environ['TOK'] * 1000, tok.startswith('ghp_'))"); err != nil || res.Stdout != "True False\n" {
		t.Errorf("the session after resume: %+v, %v; want its placeholder kept (True False)", res, err)
	}

	if _, err := n.Client.BindSecret(background, "memkey", api.BindSecretRequest{Sandbox: sb.Name, Target: "KEY", Delivery: "env"}); err != nil {
		t.Fatal(err)
	}
	_, _, seq := eventTypes(t, n, sb.Name, 0)
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	if _, reasons, _ := eventTypes(t, n, sb.Name, seq); !strings.Contains(reasons["memory_not_kept"], "by value") {
		t.Errorf("a suspend with an env secret: reasons %v; want memory_not_kept saying a secret is delivered by value", reasons)
	}
	if _, err := os.Stat(image); !os.IsNotExist(err) {
		t.Errorf("a memory image was written for a sandbox with an env secret (%v)", err)
	}
	if out := mustRun(t, n, sb.Name, `[ "$KEY" = "`+byValue+`" ] && echo delivered`); out != "delivered\n" {
		t.Errorf("the env secret after resume: %q; want it delivered", out)
	}
}
