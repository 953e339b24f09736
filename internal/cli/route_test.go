package cli

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// On the fake runtime a sandbox's commands run on this host as the test's user, in the
// sandbox's directory: the commands here write relative paths only (out.txt in /work,
// their working directory), never absolute ones.

// routed runs the CLI with -o json and decodes the routed run's result.
func (n *node) routed(t *testing.T, stdin string, args ...string) (runResult, string, error) {
	t.Helper()
	out, errOut, err := n.run(bg, stdin, append([]string{"-o", "json"}, args...)...)
	var res runResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
		t.Fatalf("airlock %s: %v, output %q, stderr %q", strings.Join(args, " "), err, out, errOut)
	}
	return res, errOut, err
}

// wantNoSandboxes checks that nothing was made.
func (n *node) wantNoSandboxes(t *testing.T) {
	t.Helper()
	list, err := n.Client.List(bg, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("%d sandboxes were made; want none", len(list))
	}
}

func TestRunRoutedToSandbox(t *testing.T) {
	n := newNode(t)
	arts := t.TempDir()
	res, _, err := n.routed(t, "", "run", "--profile", "strict", "--artifacts", arts, "--", "echo hi; mkdir -p d; echo made > d/out.txt; exit 3")
	wantExit(t, err, 3)
	if res.RanIn != "sandbox" || res.Profile != "strict" || res.Network || res.ExitCode != 3 || res.State != "failed" || res.Stdout != "hi\n" {
		t.Errorf("result %+v; want a sandbox without network, exit 3, stdout hi", res)
	}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Path != "/work/d/out.txt" || res.Artifacts[0].Size != 5 ||
		res.Artifacts[0].HostPath != filepath.Join(arts, "d", "out.txt") {
		t.Fatalf("artifacts %+v; want /work/d/out.txt, 5 bytes, in %s", res.Artifacts, arts)
	}
	if b, err := os.ReadFile(res.Artifacts[0].HostPath); err != nil || string(b) != "made\n" {
		t.Errorf("artifact holds %q, %v", b, err)
	}
	if list, _ := n.Client.List(bg, client.ListOptions{}); len(list) != 0 && list[0].State != "terminated" {
		t.Errorf("the run's sandbox is %s; want it terminated", list[0].State)
	}

	// Table output: the command's own output streams, one line says where it ran.
	out, errOut, err := n.run(bg, "", "run", "--profile", "safe", "--artifacts", arts, "--", "rm", "-rf", "build")
	wantExit(t, err, 0)
	if out != "" || !strings.Contains(errOut, "airlock: ran in a sandbox run-") ||
		!strings.Contains(errOut, "(risk 0.61 ≥ 0.5: deletes files: rm -rf build)") {
		t.Errorf("stdout %q stderr %q; want where it ran and why", out, errOut)
	}
}

func TestRunRoutedOnHost(t *testing.T) {
	n := newNode(t)
	arts := filepath.Join(t.TempDir(), "arts")
	res, _, err := n.routed(t, "", "run", "--profile", "off", "--artifacts", arts, "--", "echo hi > f.txt; pwd")
	wantExit(t, err, 0)
	if res.RanIn != "host" || res.Sandbox != "" || res.Stdout != arts+"\n" || len(res.Artifacts) != 1 ||
		res.Artifacts[0].HostPath != filepath.Join(arts, "f.txt") || res.Artifacts[0].Size != 3 {
		t.Errorf("result %+v; want the host, in the scratch directory %s, with f.txt", res, arts)
	}
	// Nothing left in the scratch directory: it is removed.
	res, _, err = n.routed(t, "", "run", "--profile", "off", "--artifacts", arts+"2", "--", "exit 7")
	wantExit(t, err, 7)
	if res.ExitCode != 7 || len(res.Artifacts) != 0 {
		t.Errorf("result %+v; want exit 7 and no artifacts", res)
	}
	if _, err := os.Stat(arts + "2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the empty scratch directory is still there: %v", err)
	}
	n.wantNoSandboxes(t)
}

func TestRunNodeDefaultProfile(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) {
		c.Router = manager.RouterConfig{Profile: "off"}
	}})}
	out, errOut, err := n.run(bg, "", "run", "--artifacts", t.TempDir(), "--", "echo", "a b")
	wantExit(t, err, 0)
	if out != "a b\n" || !strings.Contains(errOut, "airlock: ran on the host (off: everything runs on the host)") {
		t.Errorf("stdout %q stderr %q; want the node's off profile", out, errOut)
	}
	n.wantNoSandboxes(t)
}

func TestRunWithoutProfileIsUnchanged(t *testing.T) {
	n := newNode(t)
	out, errOut, err := n.run(bg, "", "run", "--", "echo", "plain")
	wantExit(t, err, 0)
	if out != "plain\n" || strings.Contains(errOut, "ran in") {
		t.Errorf("stdout %q stderr %q; want the command's output and no router line", out, errOut)
	}
	_, errOut, err = n.run(bg, "", "run", "--workspace", t.TempDir(), "--", "true")
	wantExit(t, err, 2)
	wantContains(t, "stderr", errOut, "needs a profile")
}

func TestRunWorkspaceInSandbox(t *testing.T) {
	n := newNode(t)
	ws := t.TempDir()
	for name, body := range map[string]string{"build/obj.o": "obj", "a.txt": "old", "keep.txt": "keep"} {
		os.MkdirAll(filepath.Join(ws, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("/etc/passwd", filepath.Join(ws, "link"))
	arts := t.TempDir()
	res, errOut, err := n.routed(t, "", "run", "--profile", "safe", "--workspace", ws, "--artifacts", arts, "--",
		"test -L link && rm -rf build && echo new > made.txt && echo changed > a.txt && echo s > ../work/scratch.txt")
	wantExit(t, err, 0)
	if res.RanIn != "sandbox" || res.WorkspaceAccess != "rw" {
		t.Fatalf("result %+v (%s); want a sandbox with the workspace rw", res, errOut)
	}
	for name, want := range map[string]string{"build/obj.o": "obj", "made.txt": "new\n", "a.txt": "changed\n", "keep.txt": "keep"} {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("workspace %s holds %q, %v; want %q (deletions stay in the sandbox)", name, b, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(arts, "scratch.txt")); err != nil || string(b) != "s\n" {
		t.Errorf("artifact scratch.txt: %q, %v", b, err)
	}
	if len(res.Artifacts) != 3 {
		t.Errorf("artifacts %+v; want made.txt, a.txt and scratch.txt", res.Artifacts)
	}

	// Read-only: nothing comes back into the workspace.
	res, _, err = n.routed(t, "", "run", "--profile", "strict", "--workspace", ws, "--artifacts", arts, "--",
		"cat ../workspace/keep.txt; echo x > ../workspace/new.txt 2>/dev/null; true")
	wantExit(t, err, 0)
	if res.WorkspaceAccess != "ro" || res.Stdout != "keep" {
		t.Errorf("result %+v; want ro and the workspace readable", res)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file written to a read-only workspace came back: %v", err)
	}
}

func TestRunCode(t *testing.T) {
	n := newNode(t)
	arts := t.TempDir()
	res, _, err := n.routed(t, "echo from-code; echo data > out.txt; ls", "run-code", "--lang", "bash", "--profile", "safe", "--artifacts", arts, "-")
	wantExit(t, err, 0)
	if res.RanIn != "sandbox" || res.Stdout != "from-code\nmain.sh\nout.txt\n" || len(res.Artifacts) != 1 || res.Artifacts[0].Path != "/work/out.txt" {
		t.Errorf("result %+v; want the code run in a sandbox as main.sh, out.txt copied out", res)
	}
	code := filepath.Join(t.TempDir(), "x.sh")
	os.WriteFile(code, []byte("echo on-host"), 0o644)
	out, errOut, err := n.run(bg, "", "run-code", "--lang", "bash", "--profile", "off", "--artifacts", arts, code)
	wantExit(t, err, 0)
	if out != "on-host\n" || !strings.Contains(errOut, "ran on the host") {
		t.Errorf("stdout %q stderr %q; want it run on the host", out, errOut)
	}
	// No profile anywhere: code is contained.
	res, _, err = n.routed(t, "print", "run-code", "--lang", "bash", "--artifacts", arts, "-")
	wantExit(t, err, 127)
	if res.RanIn != "sandbox" || res.Profile != "" {
		t.Errorf("result %+v; want a sandbox", res)
	}
}

func TestRouteBadInput(t *testing.T) {
	n := newNode(t)
	home := t.TempDir()
	t.Setenv("HOME", filepath.Join(home, "me"))
	os.Mkdir(filepath.Join(home, "me"), 0o755)
	file := filepath.Join(home, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown profile", []string{"run", "--profile", "paranoid", "--", "ls"}, "want one of off, safe, strict"},
		{"unknown access", []string{"run", "--profile", "safe", "--access", "all", "--", "ls"}, "--access must be"},
		{"missing workspace", []string{"run", "--profile", "safe", "--workspace", "/no/such/dir", "--", "ls"}, "does not exist"},
		{"a file as workspace", []string{"run", "--profile", "safe", "--workspace", file, "--", "ls"}, "is not a directory"},
		{"the root as workspace", []string{"run", "--profile", "safe", "--workspace", "/", "--", "ls"}, "--workspace / is refused"},
		{"the home directory", []string{"run", "--profile", "off", "--workspace", filepath.Join(home, "me"), "--", "ls"}, "home directory"},
		{"what holds the home directory", []string{"run", "--profile", "strict", "--workspace", home, "--", "ls"}, "home directory"},
		{"unparseable shell text", []string{"run", "--profile", "off", "--", `echo "unclosed`}, "cannot be parsed"},
		{"no command", []string{"run", "--profile", "safe"}, "missing the command"},
		{"detach with a profile", []string{"run", "--detach", "--profile", "safe", "--", "ls"}, "--detach"},
		{"unknown language", []string{"run-code", "--lang", "cobol", "-"}, `--lang "cobol"`},
		{"no language", []string{"run-code", "-"}, "--lang is required"},
		{"no code", []string{"run-code", "--lang", "python"}, "want 1 arguments"},
		{"missing code file", []string{"run-code", "--lang", "python", "/no/such.py"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := n.run(bg, "", tc.args...)
			wantExit(t, err, 2)
			wantContains(t, "stderr", errOut, tc.want)
			if out != "" {
				t.Errorf("stdout %q; want nothing", out)
			}
		})
	}
	n.wantNoSandboxes(t)
}

func TestParseListingRefusesHostileNames(t *testing.T) {
	text := strings.Join([]string{
		"644\t3\twork/ok.txt",
		"755\t0\tworkspace/changed.sh",
		"644\t1\t../etc/passwd",
		"644\t1\t/etc/passwd",
		"644\t1\twork/../../x",
		"644\t1\twork//x",
		"644\t1\tetc/x",
		"644\t1\twork/a\nb",
		"644\t-1\twork/neg",
		"garbage",
		"4755\t1\twork/setuid",
		"644\t9\twork/cut-sh",
	}, "\x00")
	got, warnings := parseListing(text, false)
	if len(got) != 2 || got[0].path != "work/ok.txt" || got[0].size != 3 || got[1].path != "work/setuid" || got[1].mode != 0o755 {
		t.Errorf("entries %+v; want work/ok.txt and work/setuid (mode 0755, no setuid)", got)
	}
	if len(warnings) != 9 {
		t.Errorf("%d warnings %q; want 9 (the workspace's file, seven hostile names, garbage)", len(warnings), warnings)
	}
	got, _ = parseListing(text, true)
	if len(got) != 3 || got[1].path != "workspace/changed.sh" {
		t.Errorf("with the workspace: %+v", got)
	}
}

func TestWriteInRootNeverFollowsLinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "victim")
	os.WriteFile(target, []byte("safe"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "linkdir"))
	os.Symlink(target, filepath.Join(dir, "linkfile"))
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	write := func(rel, body string, budget int64) error {
		_, err := writeInRoot(root, rel, 0o644, budget, func(w io.Writer) error {
			_, err := w.Write([]byte(body))
			return err
		})
		return err
	}
	if err := write("linkdir/victim", "pwned", 100); err == nil {
		t.Error("wrote through a symlinked directory")
	}
	if err := write("linkfile", "replaced", 100); err != nil {
		t.Errorf("replace a symlink: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "safe" {
		t.Errorf("the file a symlink pointed at holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "linkfile")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("linkfile is %v, %v; want a regular file in place of the link", fi, err)
	}
	if err := write("a/b/c.txt", "deep", 100); err != nil {
		t.Errorf("write with missing parents: %v", err)
	}
	if err := write("big", "0123456789", 5); !errors.Is(err, errTooBig) {
		t.Errorf("over the budget: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".airlock-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestListedPathRefusesTerminalTricks: a name a sandbox lists becomes a host file's name
// and is shown to the user: nothing a terminal acts on or that reorders what it shows.
func TestListedPathRefusesTerminalTricks(t *testing.T) {
	for _, p := range []string{
		"work/a\x1b[2Jb",
		"work/\u202etxt.exe", // right-to-left override: shows as exe.txt
		"work/\u2066x",
		"work/a\u0085b",  // C1 NEL
		"work/a\x9b31mb", // a lone byte, not UTF-8: CSI on an 8-bit terminal
		"work/line\u2028sep",
	} {
		if err := listedPath(p, false); err == nil {
			t.Errorf("listedPath(%q) = nil; want it refused", p)
		}
	}
	for _, p := range []string{"work/ok.txt", "work/naïve/日本.txt", "work/a b"} {
		if err := listedPath(p, false); err != nil {
			t.Errorf("listedPath(%q) = %v; want it taken", p, err)
		}
	}
}

// TestWorkspaceTarStaysInside: a workspace can change while it is read (a sandbox may
// have it mounted read-write); a directory swapped for a link to elsewhere must never
// put elsewhere's files in the tar.
func TestWorkspaceTarStaysInside(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	const secret = "SECRET-outside-the-workspace"
	os.WriteFile(filepath.Join(outside, "f.txt"), []byte(secret), 0o600)
	sub := filepath.Join(ws, "sub")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(sub, "f.txt"), []byte("in"), 0o644)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(sub, sub+".real")
			os.Symlink(outside, sub)
			os.Remove(sub)
			os.Rename(sub+".real", sub)
		}
	}()
	defer func() { close(stop); <-done }()
	for range 500 {
		f, err := workspaceTar(ws, 1<<20)
		if err != nil {
			continue // a change seen is refused: fine
		}
		tr := tar.NewReader(f)
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(tr)
			if strings.Contains(string(b), secret[:2]) || hdr.Size > 2 && hdr.Typeflag == tar.TypeReg {
				f.Close()
				t.Fatalf("the tar holds %s = %q, read through a link out of the workspace", hdr.Name, b)
			}
		}
		f.Close()
	}
}

// TestMountableOwner: a directory of root's (user or group) is copied, not mounted,
// when the sandbox may write it.
func TestMountableOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own directories as others")
	}
	for _, tc := range []struct {
		uid, gid int
		access   string
		want     bool
	}{
		{0, 0, "rw", false},
		{1000, 0, "rw", false},
		{0, 1000, "rw", false},
		{1000, 1000, "rw", true},
		{0, 0, "ro", true},
	} {
		dir := t.TempDir()
		os.Chown(dir, tc.uid, tc.gid)
		if got := mountableOwner(&work{workspace: dir, access: tc.access}); got != tc.want {
			t.Errorf("a directory of %d:%d, %s: mountable %v, want %v", tc.uid, tc.gid, tc.access, got, tc.want)
		}
	}
}

// TestArtifactsDirectoryGuard: an artifacts directory that holds files no run put there
// is refused (the command's files could replace them); a new, empty or earlier run's
// directory is used, and one left with nothing but its marker is removed.
func TestArtifactsDirectoryGuard(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, files ...string) string {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	project := mk("project", "Makefile")
	os.Symlink(mk("made"), filepath.Join(base, "link"))
	for name, tc := range map[string]struct {
		dir  string
		want string // "" allowed, else a part of the refusal
	}{
		"new":                 {filepath.Join(base, "new", "run-1"), ""},
		"empty":               {mk("empty"), ""},
		"a project":           {project, "already holds files"},
		"a file":              {filepath.Join(project, "Makefile"), "not a directory"},
		"a link":              {filepath.Join(base, "link"), "symbolic link"},
		"an earlier run's":    {mk("earlier", artifactsMarker, "out.txt"), ""},
		"the marker's absent": {mk("hooks", "pre-commit"), "already holds files"},
	} {
		err := checkArtifacts(tc.dir)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}

	dir := filepath.Join(base, "fresh", "run-2")
	parent, err := makeArtifacts(dir)
	if err != nil || !parent {
		t.Fatalf("makeArtifacts: %v, made parent %v", err, parent)
	}
	os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("x"), 0o644)
	if err := checkArtifacts(dir); err != nil {
		t.Errorf("a directory a run made, with its files: %v", err)
	}
	if got, err := listScratch(dir); err != nil || len(got) != 1 || got[0].Path != "kept.txt" {
		t.Errorf("listed %+v, %v; want kept.txt alone, not the marker", got, err)
	}
	removeIfEmpty(dir, true)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("a directory with a file was removed: %v", err)
	}
	os.Remove(filepath.Join(dir, "kept.txt"))
	removeIfEmpty(dir, true)
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory with nothing but its marker, and its parent, were kept: %v", err)
	}
}

// TestStatusRouter: status says the router's state under the node's profile, and with
// --matrix which mechanism governs each kind of caller.
func TestStatusRouter(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) {
		c.Router = manager.RouterConfig{Profile: "safe", FailClosed: true}
	}})}
	out := n.must(t, "status")
	wantContains(t, "status", out, "router: LIVE (profile safe, fail_closed)")
	if strings.Contains(out, "CALLER") {
		t.Errorf("status without --matrix printed the matrix:\n%s", out)
	}
	out = n.must(t, "status", "--matrix")
	wantContains(t, "status --matrix", out, "CALLER", "run_code", "sandbox", "shell command", "router",
		"workflow step", "verification check", "MCP server", "fence")
	var st api.Status
	if err := json.Unmarshal([]byte(n.must(t, "-o", "json", "status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Router == nil || st.Router.State != "live" || !st.Router.FailClosed || len(st.Router.Matrix) != 5 {
		t.Errorf("status -o json router: %+v; want live, fail_closed and five rows", st.Router)
	}

	none := newNode(t)
	wantContains(t, "status with no profile", none.must(t, "status", "--matrix"), "router: OFF (profile none)", "no profile, so no matrix")
}

// TestMountsWorkspace: a workspace is mounted into a sandbox of a runtime the node says
// mounts one, whatever its name; a runtime it does not name gets the workspace copied in.
func TestMountsWorkspace(t *testing.T) {
	d := &api.RouteDecision{WorkspaceMount: true, WorkspaceRuntimes: []string{"runc", "other"}}
	for _, tc := range []struct {
		runtime string
		want    bool
	}{{"", true}, {"runc", true}, {"other", true}, {"runsc", false}} {
		if got := mountsWorkspace(d, tc.runtime); got != tc.want {
			t.Errorf("runtime %q: mounts %v, want %v", tc.runtime, got, tc.want)
		}
	}
	none := &api.RouteDecision{WorkspaceRuntimes: []string{"other"}}
	if mountsWorkspace(none, "") || mountsWorkspace(none, "runc") {
		t.Error("a node whose default runtime does not mount a workspace was sent one")
	}
	if !mountsWorkspace(none, "other") {
		t.Error("a runtime the node says mounts a workspace was not sent one")
	}
}
