package cli

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// Bounds on what one routed run moves between the host and its sandbox. The listing of
// what a command made is written by the sandbox, so it is hostile: past these bounds the
// rest is left behind, with a warning.
const (
	maxWorkspaceBytes = 512 << 20 // the workspace's files, uploaded as one tar
	maxArtifacts      = 1000      // files copied out of one run
	maxArtifactBytes  = 1 << 30   // bytes copied out of one run
)

// The file model inside a sandbox:
//
//	/workspace         the workspace itself, mounted read-only or read-write, when the
//	                   daemon is on this machine (its unix socket); else a copy of it
//	                   (ro: made read-only), whose changes come back when rw. none: empty
//	/work              the command's scratch and working directory (/workspace when rw)
//	/var/tmp/.airlock-RUN/marker   touched just before the command; files under /work
//	                   (and /workspace when rw) newer than it are what the command made
//
// /var/tmp is on the sandbox's disk, not in its memory as /tmp is.
const stageDir = "/var/tmp/.airlock-"

// setupScript lays the sandbox out. $1 is the stage directory, $2 the workspace access,
// $3 "mounted" when /workspace is the host directory (nothing to unpack or protect).
// It prints the sandbox's root as its commands see it: / in a container; a runtime that
// roots file calls elsewhere (the fake one of the tests) shows it as the working
// directory, where the stage directory made through the files API then is.
// A file's time comes from a coarse clock, and a file the command writes in the tick the
// marker was made in would not be newer than it: the script returns once the clock has
// moved past the marker's time.
const setupScript = `set -e
r=/
[ -d "$1" ] || r=$PWD
cd "$r"
mkdir -p work workspace
if [ -f ".$1/workspace.tar" ]; then
	tar -xf ".$1/workspace.tar" --no-same-owner -C workspace
	rm -f ".$1/workspace.tar"
fi
if [ "$2" = ro ] && [ "$3" != mounted ]; then chmod -R a-w workspace; fi
touch ".$1/marker"
i=0
until touch ".$1/tick" && [ ".$1/tick" -nt ".$1/marker" ] || [ $i -ge 1000 ]; do i=$((i + 1)); done
rm -f ".$1/tick"
printf '%s' "$r"`

// mountsWorkspace says whether the node can mount a workspace into a sandbox of the
// runtime named ("" its default), as its route decision says.
func mountsWorkspace(d *api.RouteDecision, runtime string) bool {
	if runtime == "" {
		return d.WorkspaceMount
	}
	return slices.Contains(d.WorkspaceRuntimes, runtime)
}

// runInSandbox runs w in an ephemeral sandbox with the decided network, then copies out
// what it made and terminates the sandbox.
func (c *cmd) runInSandbox(cl *client.Client, lim *limitFlags, w *work) (*runResult, error) {
	create, err := lim.request(w.name)
	if err != nil {
		return nil, err
	}
	if !w.decision.Network {
		create.Network = &api.NetworkPolicy{Mode: "none"}
	}
	var tarball *os.File
	mountable := mountsWorkspace(w.decision, lim.runtime) && cl.Local() && mountableOwner(w)
	if w.workspace != "" && w.access != "none" && mountable {
		// The daemon mounts the directory itself, through an id mapping.
		create.Workspace = &api.Workspace{Path: w.workspace, Access: w.access}
		w.mounted = true
	} else if w.workspace != "" && w.access != "none" {
		// Before anything is made: a workspace that cannot be sent refuses the run.
		if tarball, err = workspaceTar(w.workspace, maxWorkspaceBytes); err != nil {
			return nil, err
		}
		defer tarball.Close()
	}
	var res *runResult
	err = withEphemeral(c, cl, lim, create, func() error {
		var err error
		res, err = c.sandboxRun(cl, w, tarball)
		return err
	})
	if res != nil {
		res.Sandbox = w.name
	}
	return res, err
}

// mountableOwner says whether the daemon mounts w's workspace with its access: it mounts
// a directory of root's (user or group) read-only only, since a sandbox's root writing
// it would make files of root's, set-user-ID ones too, on this host. Such a workspace
// is copied, and what comes back loses those bits.
func mountableOwner(w *work) bool {
	if w.access != "rw" {
		return true
	}
	fi, err := os.Stat(w.workspace)
	if err != nil {
		return true // the daemon says why
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid != 0 && st.Gid != 0
}

// sandboxRun lays out the sandbox, runs the command and copies back what it made.
func (c *cmd) sandboxRun(cl *client.Client, w *work, tarball *os.File) (*runResult, error) {
	stage := stageDir + w.name
	if err := cl.Mkdir(c.ctx, w.name, stage, true); err != nil {
		return nil, fmt.Errorf("prepare sandbox %s: %w", w.name, err)
	}
	if tarball != nil {
		if _, err := cl.Upload(c.ctx, w.name, stage+"/workspace.tar", 0o600, tarball); err != nil {
			return nil, fmt.Errorf("upload the workspace: %w", err)
		}
	}
	codeName := ""
	if w.lang != "" {
		codeName = "main" + codeExt[w.lang]
		if err := cl.Mkdir(c.ctx, w.name, "/work", true); err != nil {
			return nil, fmt.Errorf("prepare sandbox %s: %w", w.name, err)
		}
		if _, err := cl.Upload(c.ctx, w.name, "/work/"+codeName, 0o644, bytes.NewReader(w.code)); err != nil {
			return nil, fmt.Errorf("upload the code: %w", err)
		}
	}
	mounted := ""
	if w.mounted {
		mounted = "mounted"
	}
	setup, err := cl.Exec(c.ctx, w.name, api.ExecRequest{Argv: []string{"sh", "-c", setupScript, "sh", stage, w.access, mounted}, Timeout: "5m"})
	if err != nil {
		return nil, fmt.Errorf("prepare sandbox %s: %w", w.name, err)
	}
	root := execText(setup.Stdout, setup.StdoutBytes)
	if setup.State != api.ExecSucceeded || !path.IsAbs(root) {
		return nil, fmt.Errorf("prepare sandbox %s: %s", w.name, strings.TrimSpace(execText(setup.Stderr, setup.StderrBytes)+" "+setup.Error))
	}

	req := api.ExecRequest{Argv: w.argv, Cwd: path.Join(root, "work")}
	if w.access == "rw" && w.workspace != "" {
		req.Cwd = path.Join(root, "workspace")
	}
	if w.lang != "" {
		req.Argv = []string{interpreters[w.lang], path.Join(root, "work", codeName)}
	}
	if w.timeout > 0 {
		req.Timeout = w.timeout.String()
	}
	var out *api.ExecResult
	if c.json() {
		out, err = cl.Exec(c.ctx, w.name, req)
	} else {
		out, err = cl.ExecStream(c.ctx, w.name, req, c.stdout, c.stderr)
	}
	if err != nil {
		return nil, err
	}
	res := &runResult{State: out.State, Duration: (time.Duration(out.DurationMS) * time.Millisecond).String(),
		Stdout: execText(out.Stdout, out.StdoutBytes), Stderr: execText(out.Stderr, out.StderrBytes)}
	var why string
	res.ExitCode, why = exitCode(out, req.Timeout)
	if why != "" {
		res.Warnings = append(res.Warnings, why)
	}
	if c.ctx.Err() != nil {
		return res, nil // cancelled: copy nothing out
	}
	res.Artifacts, res.Warnings = c.copyOut(cl, w, root, stage, codeName, res.Warnings)
	return res, nil
}

// copyOut lists the files the command made under /work (and changed under /workspace
// when it is writable) with one exec, and copies each back to this host: /work's into
// the artifacts directory, /workspace's into the workspace (unless it is mounted: they
// are there already). Deleted files of a copied workspace stay where they are on the
// host.
func (c *cmd) copyOut(cl *client.Client, w *work, root, stage, codeName string, warnings []string) ([]artifact, []string) {
	dirs := []string{"work"}
	if w.access == "rw" && w.workspace != "" {
		dirs = append(dirs, "workspace")
	}
	argv := append([]string{"find"}, dirs...)
	argv = append(argv, "-newer", "."+stage+"/marker", "-type", "f", "-printf", `%m\t%s\t%p\0`)
	list, err := cl.Exec(c.ctx, w.name, api.ExecRequest{Argv: argv, Cwd: root, Timeout: "1m"})
	if err != nil {
		return nil, append(warnings, "could not list the files the command made: "+err.Error())
	}
	text := execText(list.Stdout, list.StdoutBytes)
	if list.State != api.ExecSucceeded && text == "" {
		return nil, append(warnings, "could not list the files the command made: "+strings.TrimSpace(execText(list.Stderr, list.StderrBytes)))
	}
	if list.Truncated {
		warnings = append(warnings, "the list of files the command made was cut short; some were left behind")
	}
	entries, skipped := parseListing(text, w.access == "rw" && w.workspace != "")
	warnings = append(warnings, skipped...)
	var dests artifactDests
	defer dests.close()
	var out []artifact
	var total int64
	for i, e := range entries {
		if codeName != "" && e.path == "work/"+codeName {
			continue
		}
		if i >= maxArtifacts {
			warnings = append(warnings, fmt.Sprintf("%d more files were left behind: at most %d are copied out", len(entries)-i, maxArtifacts))
			break
		}
		if e.size > maxArtifactBytes-total {
			warnings = append(warnings, fmt.Sprintf("%s and the files after it were left behind: at most %s is copied out", e.path, formatSize(maxArtifactBytes)))
			break
		}
		if rel, ok := strings.CutPrefix(e.path, "workspace/"); ok && w.mounted {
			out = append(out, artifact{Path: "/" + e.path, HostPath: filepath.Join(w.workspace, filepath.FromSlash(rel)), Size: e.size})
			continue
		}
		a, n, err := dests.copy(c.ctx, cl, w, e, maxArtifactBytes-total)
		total += n
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s was not copied out: %v", e.path, err))
			continue
		}
		out = append(out, a)
	}
	return out, warnings
}

// execText is an exec's output, whichever way the daemon sent it.
func execText(s string, b []byte) string {
	if b != nil {
		return string(b)
	}
	return s
}
