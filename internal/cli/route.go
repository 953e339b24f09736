package cli

// The command router's side of run and run-code: ask the daemon where the work runs
// (POST /v1/route), then run it there — on the host, on the host inside the fence, or
// in an ephemeral sandbox — and say where and why.
//
//	run --profile P -- CMD ──► client.Route ──► host:    os/exec in the workspace (or scratch)
//	                                       ──► fence:   fence.Fence, the same directories
//	                                       ──► sandbox: create, upload the workspace, run in
//	                                                    /work (/workspace when rw), copy back
//	                                                    the files it made, terminate
//
// The scratch directory of a run on the host is its artifacts directory (--artifacts,
// default ./airlock-artifacts/RUN-NAME): what the command leaves there is what it made.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/router/decision"
)

// routeFlags are the flags run and run-code share for the router.
type routeFlags struct {
	profile   string
	workspace string
	access    string
	artifacts string
}

func (f *routeFlags) register(c *cmd) {
	c.fs.StringVar(&f.profile, "profile", "", "isolation profile `P`: off, safe or strict (default: the daemon's router.profile, if any)")
	c.fs.StringVar(&f.workspace, "workspace", "", "project `DIR` the command works on (default: none, a scratch directory)")
	c.fs.StringVar(&f.access, "access", "", "workspace access `MODE`: none, ro or rw (default: the profile's)")
	c.fs.StringVar(&f.artifacts, "artifacts", "", "`DIR` for the files the command makes (default ./airlock-artifacts/RUN-NAME, or under $TMPDIR when that is in the workspace)")
}

// check refuses flag values that are wrong before anything is asked or run.
func (f *routeFlags) check() error {
	if f.profile != "" && !slices.Contains(decision.Profiles(), f.profile) {
		return usagef("--profile %q: want one of %s", f.profile, strings.Join(decision.Profiles(), ", "))
	}
	switch f.access {
	case "", "none", "ro", "rw":
	default:
		return usagef("--access must be none, ro or rw, not %q", f.access)
	}
	return nil
}

// used reports whether any flag that needs a profile was given.
func (f *routeFlags) used() bool { return f.workspace != "" || f.access != "" || f.artifacts != "" }

// work is one routed piece of work and where it runs.
type work struct {
	name     string   // the run's name: the sandbox's, and the artifacts directory's
	argv     []string // on the host and in the fence
	shell    bool     // argv is sh -c TEXT
	lang     string   // run-code: the language, and code its text (argv is then unset)
	code     []byte
	codeFile string // run-code: the host file the code came from ("" for stdin)
	timeout  time.Duration
	env      map[string]string

	decision  *api.RouteDecision
	workspace string // resolved, or ""
	access    string // none, ro or rw: what the command is given of the workspace
	mounted   bool   // in a sandbox, the workspace is the host directory itself, not a copy
	artifacts string // the artifacts directory (made when needed)
}

// runResult is what a routed run prints with --output json.
type runResult struct {
	RanIn           string            `json:"ran_in"` // host, fence or sandbox
	Sandbox         string            `json:"sandbox,omitempty"`
	Reason          string            `json:"reason"`
	Score           float64           `json:"score"`
	Reasons         []api.RouteReason `json:"reasons"`
	Profile         string            `json:"profile"`
	Threshold       float64           `json:"threshold"`
	WorkspaceAccess string            `json:"workspace_access"`
	Network         bool              `json:"network"`
	Degraded        bool              `json:"degraded,omitempty"` // a sandbox was due, but no runtime could run one
	ExitCode        int               `json:"exit_code"`
	State           string            `json:"state"`
	Duration        string            `json:"duration"`
	Stdout          string            `json:"stdout"`
	Stderr          string            `json:"stderr"`
	Artifacts       []artifact        `json:"artifacts"`
	Warnings        []string          `json:"warnings,omitempty"`
}

// artifact is one file the command made (or changed in a writable workspace), where it
// is now on this host, and its size.
type artifact struct {
	Path     string `json:"path"` // as the command saw it: /work/out.txt, or relative to the scratch directory
	HostPath string `json:"host_path"`
	Size     int64  `json:"size"`
}

// route asks the daemon where w runs. A nil decision (no error) means no profile applies.
func (c *cmd) route(cl *client.Client, f *routeFlags, req api.RouteRequest) (*api.RouteDecision, error) {
	req.Profile, req.WorkspaceAccess = f.profile, f.access
	d, err := cl.Route(c.ctx, req)
	if err != nil {
		if f.profile == "" && (client.IsNotFound(err) || errors.Is(err, errdefs.ErrPermissionDenied)) {
			return nil, nil // a daemon without the router, or a caller it does not answer: no profile applies
		}
		return nil, err
	}
	if d.Profile == "" {
		return nil, nil
	}
	return d, nil
}

// shellArgv is how a command given after -- runs: one argument is shell text, run with
// sh -c (and refused when it cannot be parsed); several are argv.
func shellArgv(command []string) (argv []string, shell bool, err error) {
	if len(command) != 1 {
		return command, false, nil
	}
	if _, err := syntax.NewParser().Parse(strings.NewReader(command[0]), ""); err != nil {
		return nil, false, usagef("the command cannot be parsed as shell text: %v", err)
	}
	return []string{"sh", "-c", command[0]}, true, nil
}

// prepare resolves the workspace and the artifacts directory of w under its decision.
// A workspace that does not exist, is / or the home directory, or holds the home
// directory or the daemon's directory, is refused: nothing runs.
func (w *work) prepare(f *routeFlags) error {
	w.access = "none"
	if f.workspace != "" {
		ws, err := checkWorkspace(f.workspace)
		if err != nil {
			return err
		}
		w.workspace, w.access = ws, w.decision.WorkspaceAccess
	}
	w.artifacts = f.artifacts
	if w.artifacts == "" {
		w.artifacts = filepath.Join("airlock-artifacts", w.name)
		if abs, err := filepath.Abs(w.artifacts); err == nil && w.workspace != "" && within(abs, w.workspace) {
			// The usual case, --workspace . from the project: the default goes beside
			// the workspace's copy, not into it.
			w.artifacts = filepath.Join(os.TempDir(), "airlock-artifacts", w.name)
		}
	}
	abs, err := filepath.Abs(w.artifacts)
	if err != nil {
		return err
	}
	w.artifacts = abs
	if w.workspace != "" && w.access == "rw" && within(abs, w.workspace) && w.decision.Place == string(decision.PlaceSandbox) {
		// Copied back twice otherwise; and the next run's upload would carry them.
		return usagef("--artifacts %s is inside the writable workspace; choose a directory outside it", abs)
	}
	return checkArtifacts(abs)
}

// artifactsMarker is the file Airlock leaves in an artifacts directory it made, so that
// later runs may use the directory again.
const artifactsMarker = ".airlock-artifacts"

// checkArtifacts refuses an artifacts directory that holds files Airlock did not put
// there: what the command makes lands beside them and may replace them (a git hook, a
// script on the PATH, a shell's startup file), which in a directory of its own harms
// nothing. A directory that does not exist yet, an empty one, and one an earlier run made
// are allowed.
func checkArtifacts(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return usagef("--artifacts %s: %v", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return usagef("--artifacts %s is a symbolic link; give the directory it leads to", dir)
	case !fi.IsDir():
		return usagef("--artifacts %s is not a directory", dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, artifactsMarker)); err == nil {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return usagef("--artifacts %s: %v", dir, err)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return usagef("--artifacts %s already holds files that no run of Airlock put there; the command's files would go beside them and could replace them: give a new or empty directory (the default is ./airlock-artifacts/RUN-NAME)", dir)
	}
	return nil
}

// makeArtifacts makes the artifacts directory, marked as Airlock's; madeParent says it
// also made its parent (./airlock-artifacts), which removeIfEmpty may then remove too.
func makeArtifacts(dir string) (madeParent bool, err error) {
	if _, err := os.Stat(filepath.Dir(dir)); errors.Is(err, fs.ErrNotExist) {
		madeParent = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("artifacts directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, artifactsMarker), []byte("Airlock keeps the files of its runs here.\n"), 0o644); err != nil {
		return false, fmt.Errorf("artifacts directory: %w", err)
	}
	return madeParent, nil
}

// checkWorkspace resolves dir and refuses what must never be a workspace.
func checkWorkspace(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usagef("--workspace %s: %v", dir, err)
	}
	ws, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", usagef("--workspace %s does not exist", dir)
	}
	fi, err := os.Stat(ws)
	if err != nil || !fi.IsDir() {
		return "", usagef("--workspace %s is not a directory", dir)
	}
	if ws == "/" {
		return "", usagef("--workspace / is refused: a workspace is one project, never the whole system")
	}
	for _, h := range homeDirs() {
		if within(h, ws) {
			return "", usagef("--workspace %s is refused: it is or holds the home directory %s, with its keys and credentials", dir, h)
		}
	}
	if within(fence.DaemonDir, ws) {
		return "", usagef("--workspace %s is refused: it holds the daemon's directory %s", dir, fence.DaemonDir)
	}
	return ws, nil
}

// homeDirs are the home directories a workspace must not hold: $HOME and the user's.
func homeDirs() []string {
	var out []string
	for _, h := range []string{os.Getenv("HOME"), userHome()} {
		if h == "" || !filepath.IsAbs(h) {
			continue
		}
		if r, err := filepath.EvalSymlinks(h); err == nil {
			h = r
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

func userHome() string {
	h, _ := os.UserHomeDir()
	return h
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// runRouted runs w where its decision says and reports it.
func (c *cmd) runRouted(cl *client.Client, lim *limitFlags, w *work) error {
	var res *runResult
	var err error
	switch decision.Place(w.decision.Place) {
	case decision.PlaceHost, decision.PlaceFence:
		res, err = c.runOnHost(w)
	case decision.PlaceSandbox:
		res, err = c.runInSandbox(cl, lim, w)
	default:
		return fmt.Errorf("the daemon answered an unknown place %q", w.decision.Place)
	}
	if res == nil {
		return err
	}
	d := w.decision
	res.RanIn, res.Reason, res.Score, res.Reasons = d.Place, d.Reason, d.Score, d.Reasons
	res.Profile, res.Threshold, res.WorkspaceAccess, res.Network = d.Profile, d.Threshold, w.access, d.Network
	res.Degraded = d.Degraded
	if res.Reasons == nil {
		res.Reasons = []api.RouteReason{}
	}
	if res.Artifacts == nil {
		res.Artifacts = []artifact{}
	}
	if c.json() {
		if perr := c.printJSON(res); perr != nil && err == nil {
			err = perr
		}
	} else {
		for _, warn := range res.Warnings {
			fmt.Fprintf(c.stderr, "airlock: %s\n", termSafe(warn))
		}
		fmt.Fprintf(c.stderr, "airlock: %s\n", termSafe(ranLine(w, res)))
		if n := len(res.Artifacts); n > 0 {
			fmt.Fprintf(c.stderr, "airlock: %d %s: %s\n", n, plural(n, "file", "files"), termSafe(artifactSummary(w, res.Artifacts)))
		}
	}
	if err != nil {
		return err
	}
	return exitErr(res.ExitCode)
}

// ranLine says where the work ran and why, in one line:
//
//	ran on the host in the fence (safe: risk 0.00)
//	ran in a sandbox run-1a2b3c (safe: risk 0.62 ≥ 0.5: deletes files: rm -rf build)
func ranLine(w *work, res *runResult) string {
	d := w.decision
	var where string
	switch decision.Place(d.Place) {
	case decision.PlaceHost:
		where = "ran on the host"
	case decision.PlaceFence:
		where = "ran on the host in the fence"
	default:
		where = "ran in a sandbox " + res.Sandbox
	}
	score := strconv.FormatFloat(d.Score, 'f', 2, 64)
	threshold := strconv.FormatFloat(d.Threshold, 'f', -1, 64)
	var why string
	switch {
	case d.Degraded:
		why = d.Reason
	case d.Profile == "":
		why = "no profile: every run is contained"
	case decision.Place(d.Place) == decision.PlaceHost:
		why = d.Profile + ": everything runs on the host"
	case w.lang != "":
		why = d.Profile + ": code always runs in a sandbox"
	case decision.Place(d.Place) == decision.PlaceFence && d.Score < d.Threshold:
		why = d.Profile + ": risk " + score
	case decision.Place(d.Place) == decision.PlaceFence:
		why = d.Profile + ": shell commands run on the host in the fence"
	case d.Score >= d.Threshold && d.Profile != decision.ProfileStrict:
		why = "risk " + score + " ≥ " + threshold
		if len(d.Reasons) > 0 {
			why += ": " + d.Reasons[0].Text
		}
	default:
		why = d.Profile + ": every command runs in a sandbox"
		if !d.Network {
			why += ", without network"
		}
	}
	return where + " (" + why + ")"
}

// artifactSummary says where the files went.
func artifactSummary(w *work, list []artifact) string {
	var toWorkspace, toArtifacts int
	for _, a := range list {
		if w.workspace != "" && within(a.HostPath, w.workspace) {
			toWorkspace++
		} else {
			toArtifacts++
		}
	}
	var parts []string
	if toArtifacts > 0 {
		parts = append(parts, fmt.Sprintf("%d in %s", toArtifacts, w.artifacts))
	}
	if toWorkspace > 0 {
		parts = append(parts, fmt.Sprintf("%d copied back into %s", toWorkspace, w.workspace))
	}
	return strings.Join(parts, ", ")
}

// verboseFlag registers --verbose and its short -v, with usage.
func (c *cmd) verboseFlag(usage string) *bool {
	v := c.fs.Bool("verbose", false, usage)
	c.fs.BoolVar(v, "v", false, "short for --verbose")
	return v
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// errNoProfile refuses router flags when no profile applies.
var errNoProfile = errors.New("needs a profile: --profile off|safe|strict, or router.profile in the daemon's configuration")
