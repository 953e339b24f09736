package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/router/decision"
)

// capturedOutput bounds what --output json keeps of a host command's stdout or stderr.
const capturedOutput = 16 << 20

// runOnHost runs w on this host, unfenced (place host) or inside the fence (place
// fence). It works in the workspace when it may write it, else in the artifacts
// directory, which is its scratch: what it leaves there is what it made.
func (c *cmd) runOnHost(w *work) (*runResult, error) {
	fenced := decision.Place(w.decision.Place) == decision.PlaceFence
	madeParent, err := makeArtifacts(w.artifacts)
	if err != nil {
		return nil, err
	}
	defer removeIfEmpty(w.artifacts, madeParent)

	argv := w.argv
	if w.lang != "" {
		path, cleanup, err := hostCodeFile(w)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		argv = []string{interpreters[w.lang], path}
	}
	dir := w.artifacts
	if w.workspace != "" && (w.access == "rw" || !fenced) {
		dir = w.workspace
	}
	ctx, cancel := c.ctx, context.CancelFunc(func() {})
	if w.timeout > 0 {
		ctx, cancel = context.WithTimeout(c.ctx, w.timeout)
	}
	defer cancel()

	res := &runResult{}
	var outBuf, errBuf cappedBuffer
	stdout, stderr := io.Writer(c.stdout), io.Writer(c.stderr)
	if c.json() {
		stdout, stderr = &outBuf, &errBuf
	}
	env := os.Environ()
	for k, v := range w.env {
		env = append(env, k+"="+v)
	}
	start := time.Now()
	var runErr error
	if fenced {
		runErr = c.runFenced(ctx, w, argv, dir, env, stdout, stderr)
	} else {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = dir, env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, stdout, stderr
		cmd.WaitDelay = 5 * time.Second // children that keep the output open do not hold the run
		runErr = cmd.Run()
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	res.Stdout, res.Stderr = outBuf.String(), errBuf.String()
	if err := hostOutcome(c, ctx, w, runErr, res); err != nil {
		return nil, err
	}
	res.Artifacts, err = listScratch(w.artifacts)
	if err != nil {
		res.Warnings = append(res.Warnings, "could not list the files the command made: "+err.Error())
	}
	return res, nil
}

// runFenced runs argv inside the fence: the workspace with the decided access, the
// artifacts directory writable, a scratch directory of its own as TMPDIR, the network
// as decided.
func (c *cmd) runFenced(ctx context.Context, w *work, argv []string, dir string, env []string, stdout, stderr io.Writer) error {
	tmp, err := os.MkdirTemp("", "airlock-run-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	f := fence.Fence{Access: w.access, Scratch: tmp, Network: w.decision.Network, ExtraWrite: []string{w.artifacts}, Daemon: c.fenceDaemon()}
	if w.workspace != "" && w.access != "none" {
		f.Workspace = w.workspace
	} else {
		f.Access = "none"
	}
	if w.codeFile != "" {
		f.ExtraRead = []string{argv[1]}
	}
	cmd, err := f.Command(ctx, argv)
	if errors.Is(err, errdefs.ErrInvalidArgument) {
		return usagef("%s", strings.TrimPrefix(err.Error(), "fence: "))
	}
	if err != nil {
		return err
	}
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return &fenceSetupError{err}
	}
	return cmd.Wait()
}

// fenceSetupError is a fence that could not be put up: the command did not run.
type fenceSetupError struct{ err error }

func (e *fenceSetupError) Error() string { return e.err.Error() }

// hostOutcome fills res's exit code and state from how a host command ended, or
// returns the error that means it did not run.
func hostOutcome(c *cmd, ctx context.Context, w *work, err error, res *runResult) error {
	var ee *exec.ExitError
	var fe *fence.ExitError
	var se *fenceSetupError
	switch {
	case err == nil:
		res.State = "succeeded"
	case c.ctx.Err() != nil:
		res.State, res.ExitCode = "cancelled", exitCancelled
	case ctx.Err() != nil:
		res.State, res.ExitCode = "timeout", exitTimeout
		res.Warnings = append(res.Warnings, "command timed out after "+w.timeout.String())
	case errors.As(err, &fe):
		res.State, res.ExitCode = "failed", fe.Code
		if fe.Signal != 0 {
			res.State = "killed"
		}
	case errors.As(err, &ee):
		res.State, res.ExitCode = "failed", ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.State, res.ExitCode = "killed", 128+int(ws.Signal())
		}
	case errors.As(err, &se):
		fmt.Fprintf(c.stderr, "airlock %v\n", se.err) // "airlock fence: …", as the fence's child says it
		return ExitError{fence.ExitSetup}
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		res.State, res.ExitCode = "failed", fence.ExitNotFound
		res.Warnings = append(res.Warnings, err.Error())
	default:
		return err
	}
	return nil
}

// interpreters run run-code's languages.
var interpreters = map[string]string{"python": "python3", "node": "node", "bash": "bash"}

// codeExt names the file a snippet is written to.
var codeExt = map[string]string{"python": ".py", "node": ".js", "bash": ".sh"}

// hostCodeFile is the file a snippet runs from on the host: its own file, or the text
// from stdin written to a file of its own.
func hostCodeFile(w *work) (string, func(), error) {
	if w.codeFile != "" {
		p, err := filepath.Abs(w.codeFile)
		return p, func() {}, err
	}
	f, err := os.CreateTemp("", "airlock-code-*"+codeExt[w.lang])
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.Remove(f.Name()) }
	if _, err := f.Write(w.code); err != nil {
		f.Close()
		cleanup()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		cleanup()
		return "", nil, err
	}
	w.codeFile = f.Name()
	return f.Name(), cleanup, nil
}

// removeIfEmpty removes the artifacts directory when nothing but its marker was left in
// it.
func removeIfEmpty(dir string, parent bool) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(2)
	f.Close()
	if len(names) != 1 || names[0] != artifactsMarker {
		return
	}
	os.Remove(filepath.Join(dir, artifactsMarker))
	if os.Remove(dir) == nil && parent {
		os.Remove(filepath.Dir(dir))
	}
}

// listScratch lists the regular files under dir, as artifacts.
func listScratch(dir string) ([]artifact, error) {
	var out []artifact
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || p == filepath.Join(dir, artifactsMarker) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, artifact{Path: rel, HostPath: p, Size: fi.Size()})
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return out, err
}

// cappedBuffer keeps the first capturedOutput bytes written to it and counts the rest.
type cappedBuffer struct {
	buf     bytes.Buffer
	dropped int64
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := max(capturedOutput-b.buf.Len(), 0); room < n {
		b.dropped += int64(n - room)
		p = p[:room]
	}
	b.buf.Write(p)
	return n, nil
}

func (b *cappedBuffer) String() string {
	if b.dropped > 0 {
		return b.buf.String() + fmt.Sprintf("\n[airlock: %d more bytes dropped]\n", b.dropped)
	}
	return b.buf.String()
}
