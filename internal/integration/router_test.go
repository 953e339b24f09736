package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The command router end to end: the airlock binary asks a real daemon where each command
// runs and runs it there — the host fence, or a runc sandbox — with the file model of
// docs/router.md.

// routedRun is what airlock run -o json prints for a routed run.
type routedRun struct {
	RanIn           string  `json:"ran_in"`
	Sandbox         string  `json:"sandbox"`
	Reason          string  `json:"reason"`
	Score           float64 `json:"score"`
	Profile         string  `json:"profile"`
	WorkspaceAccess string  `json:"workspace_access"`
	Network         bool    `json:"network"`
	ExitCode        int     `json:"exit_code"`
	State           string  `json:"state"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	Artifacts       []struct {
		Path     string `json:"path"`
		HostPath string `json:"host_path"`
		Size     int64  `json:"size"`
	} `json:"artifacts"`
}

func (d *daemon) routed(t *testing.T, stdin string, args ...string) routedRun {
	t.Helper()
	out, errOut, code := d.airlockIn(stdin, append([]string{"-o", "json"}, args...)...)
	var r routedRun
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("airlock %s: exit %d, %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, err, out, errOut)
	}
	return r
}

func TestRouterCLI(t *testing.T) {
	d := startDaemonB(t)
	arts := filepath.Join(t.TempDir(), "arts")

	t.Run("a harmless command runs in the fence", func(t *testing.T) {
		r := d.routed(t, "", "run", "--profile", "safe", "--artifacts", arts, "--", "ls")
		if r.RanIn != "fence" || r.Sandbox != "" || r.Score != 0 || r.State != "succeeded" {
			t.Errorf("ls under safe: %+v; want the fence", r)
		}
		_, errOut, code := d.airlock("run", "--profile", "safe", "--artifacts", arts, "--", "ls")
		if code != 0 || !strings.Contains(errOut, "airlock: ran on the host in the fence (safe: risk 0.00)") {
			t.Errorf("ls under safe: exit %d, stderr %q; want where it ran", code, errOut)
		}
	})

	t.Run("the workspace is mounted: rw changes it in place, ro refuses", func(t *testing.T) {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, "build"), 0o755)
		os.WriteFile(filepath.Join(ws, "build", "obj.o"), []byte("obj"), 0o644)
		// Owned by a user: through the mount they are the sandbox's root's.
		for _, p := range []string{ws, filepath.Join(ws, "build"), filepath.Join(ws, "build", "obj.o")} {
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, code := d.airlockIn("", "-o", "json", "run", "--profile", "safe", "--workspace", ws, "--access", "ro", "--artifacts", arts, "--", "cat /workspace/build/obj.o && rm -rf /workspace/build")
		var r routedRun
		if err := json.Unmarshal([]byte(out), &r); err != nil || code == 0 {
			t.Fatalf("a deletion in a read-only workspace: exit %d, %v\nstdout: %s\nstderr: %s", code, err, out, errOut)
		}
		if r.RanIn != "sandbox" || r.WorkspaceAccess != "ro" || r.ExitCode == 0 || r.Stdout != "obj" || !strings.Contains(r.Stderr, "Read-only file system") {
			t.Errorf("rm -rf /workspace/build with the workspace read-only: %+v; want it read and refused in a sandbox", r)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "build", "obj.o")); err != nil || string(b) != "obj" {
			t.Errorf("the host's build/obj.o after a read-only run: %q, %v; want it untouched", b, err)
		}
		r = d.routed(t, "", "run", "--profile", "safe", "--workspace", ws, "--artifacts", arts, "--",
			"rm -rf build && test ! -e build && id -u && stat -c %u . && echo new > new.txt")
		if r.RanIn != "sandbox" || r.WorkspaceAccess != "rw" || r.Stdout != "0\n0\n" || !strings.Contains(r.Reason, "deletes files") {
			t.Errorf("rm -rf build under safe: %+v; want a sandbox whose root owns the workspace", r)
		}
		if _, err := os.Stat(filepath.Join(ws, "build")); !os.IsNotExist(err) {
			t.Errorf("build on the host after rm -rf build in a read-write workspace: %v; want it gone", err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, "new.txt"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("new.txt on the host: uid %d gid %d (%v); want the workspace owner's 1000 1000", st.Uid, st.Gid, err)
		}
		if len(r.Artifacts) != 1 || r.Artifacts[0].Path != "/workspace/new.txt" || r.Artifacts[0].HostPath != filepath.Join(ws, "new.txt") || r.Artifacts[0].Size != 4 {
			t.Errorf("artifacts %+v; want /workspace/new.txt at its host path", r.Artifacts)
		}
	})

	t.Run("create --workspace mounts a directory into a sandbox that stays", func(t *testing.T) {
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "f"), []byte("from the host"), 0o644)
		d.must("create", "wsbox", "--workspace", ws+":ro")
		defer d.airlock("rm", "wsbox")
		if got := d.must("get", "wsbox"); !strings.Contains(got, ws+" at /workspace (ro)") {
			t.Errorf("get wsbox does not show the workspace:\n%s", got)
		}
		if got := d.must("exec", "wsbox", "--", "cat", "/workspace/f"); got != "from the host" {
			t.Errorf("cat /workspace/f = %q", got)
		}
		if _, _, code := d.airlock("exec", "wsbox", "--", "touch", "/workspace/g"); code == 0 {
			t.Errorf("a read-only workspace took a new file")
		}
		if _, _, code := d.airlock("create", "wsbox2", "--workspace", filepath.Join(ws, "nope")); code == 0 {
			t.Errorf("a missing workspace directory was taken")
		}
	})

	t.Run("a file made in /work comes back as an artifact", func(t *testing.T) {
		r := d.routed(t, "", "run", "--profile", "safe", "--artifacts", arts, "--", "printf 'made in a sandbox\n' > /work/out.txt")
		if r.RanIn != "sandbox" || len(r.Artifacts) != 1 || r.Artifacts[0].Path != "/work/out.txt" || r.Artifacts[0].Size != 18 {
			t.Fatalf("result %+v; want /work/out.txt, 18 bytes", r)
		}
		if b, err := os.ReadFile(r.Artifacts[0].HostPath); err != nil || string(b) != "made in a sandbox\n" {
			t.Errorf("%s holds %q, %v", r.Artifacts[0].HostPath, b, err)
		}
	})

	t.Run("strict runs in a sandbox without network", func(t *testing.T) {
		interfaces := "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
		r := d.routed(t, "", "run", "--profile", "strict", "--artifacts", arts, "--", interfaces)
		if r.RanIn != "sandbox" || r.Network || r.Stdout != "lo\n" {
			t.Errorf("the interfaces under strict: %+v; want a sandbox with loopback only", r)
		}
		// The same command contained under safe has the network.
		r = d.routed(t, "", "run", "--profile", "safe", "--artifacts", arts, "--", "rm -rf x; "+interfaces)
		if r.RanIn != "sandbox" || !r.Network || r.Stdout == "lo\n" {
			t.Errorf("the interfaces contained under safe: %+v; want more than loopback", r)
		}
	})

	t.Run("run-code runs python in a sandbox", func(t *testing.T) {
		r := d.routed(t, "print(6 * 7)\nopen('result.txt', 'w').write('42')\n", "run-code", "--lang", "python", "--profile", "safe", "--artifacts", arts, "-")
		if r.RanIn != "sandbox" || r.Stdout != "42\n" || len(r.Artifacts) != 1 || r.Artifacts[0].Size != 2 {
			t.Errorf("python under safe: %+v; want 42 from a sandbox and result.txt", r)
		}
	})

	if list := d.must("ls", "-o", "json"); strings.Contains(list, `"running"`) {
		t.Errorf("sandboxes still running after the routed runs: %s", list)
	}
}

// BenchmarkRouterContained: a contained `airlock run --profile safe -- rm -rf x` (route,
// create, lay out, run, list what it made, terminate) against a plain `airlock run --
// rm -rf x` (create, run, terminate), both through the CLI binary against one daemon, in
// turn so both see the same load (target: at most 1.2x).
//
//	go test ./internal/integration -run '^$' -bench RouterContained -benchtime 1x
func BenchmarkRouterContained(b *testing.B) {
	d := startDaemonB(b)
	arts := b.TempDir()
	const n = 20
	var routed, plain []time.Duration
	time1 := func(args ...string) time.Duration {
		t0 := time.Now()
		if out, errOut, code := d.airlock(args...); code != 0 {
			b.Fatalf("airlock %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return time.Since(t0)
	}
	time1("run", "--", "true") // the first sandbox warms the host image
	for i := 0; i < n; i++ {
		routed = append(routed, time1("run", "--profile", "safe", "--artifacts", arts, "--", "rm -rf x"))
		plain = append(plain, time1("run", "--", "rm", "-rf", "x"))
	}
	r, p := p50(routed), p50(plain)
	b.ReportMetric(r, "routed-p50-ms")
	b.ReportMetric(p, "plain-p50-ms")
	b.ReportMetric(r/p, "ratio")
	fmt.Printf("router: contained rm -rf x p50 %.1f ms, plain run p50 %.1f ms, ratio %.2fx (target ≤ 1.2x)\n", r, p, r/p)
}
