package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// RunCodeInput is the input of run_code.
type RunCodeInput struct {
	Language string `json:"language" jsonschema:"the interpreter: python (python3), node or bash"`
	Code     string `json:"code" jsonschema:"the program text, run as a script (at most 100 KiB; write larger programs with write_file and run them with exec)"`
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"name or id of an existing sandbox to run in (its files and installed packages are kept between calls); empty: a throwaway sandbox is created for this call and terminated after it"`
	Image    string `json:"image,omitempty" jsonschema:"image of the throwaway sandbox, here or a registry reference pulled when it is not (default: host, the node's own /usr tree); ignored with sandbox"`
	Stdin    string `json:"stdin,omitempty" jsonschema:"text given to the program on its standard input"`
	Timeout  int    `json:"timeout_seconds,omitempty" jsonschema:"stop the program after this many seconds"`
}

// ExecInput is the input of exec.
type ExecInput struct {
	Sandbox string            `json:"sandbox" jsonschema:"name or id of the sandbox to run in; a suspended sandbox is resumed first"`
	Command string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (give this or argv)"`
	Argv    []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"absolute working directory in the sandbox (default: the image's, usually /root)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this command"`
	Stdin   string            `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input"`
	Timeout int               `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this many seconds"`
}

// ExecOutput is how a command ended and what it wrote, within the output cap.
type ExecOutput struct {
	Sandbox    string `json:"sandbox" jsonschema:"the sandbox the command ran in"`
	Temporary  bool   `json:"temporary,omitempty" jsonschema:"the sandbox was made for this call and is gone"`
	ExecID     string `json:"exec_id" jsonschema:"this call's id, which names its full-output files"`
	State      string `json:"state" jsonschema:"succeeded, failed (non-zero exit), timeout, cancelled, oom_killed or killed"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty" jsonschema:"why the command did not run or end by itself"`
	Stdout     Stream `json:"stdout"`
	Stderr     Stream `json:"stderr"`
}

// Stream is one output stream of a command, as shown.
type Stream struct {
	Text      string `json:"text" jsonschema:"the output, or its head and tail around a marked cut when truncated"`
	Bytes     int64  `json:"bytes" jsonschema:"how many bytes the command wrote"`
	Truncated bool   `json:"truncated,omitempty"`
	// FullPath is where the whole stream is kept in the sandbox when it was truncated.
	FullPath string `json:"full_path,omitempty" jsonschema:"when truncated: the file in the sandbox holding the whole output, for read_file with offset and limit"`
	// FullNote says why the whole stream is not (all) in FullPath.
	FullNote string `json:"full_note,omitempty"`
}

// Defaults and bounds of the exec tools.
const (
	defaultTimeout  = 120 // seconds
	maxCodeBytes    = 100 << 10
	terminateBudget = 30 * time.Second // clean-up of a throwaway sandbox
)

// interpreters maps run_code's languages to the argv that runs a program text.
var interpreters = map[string][]string{
	"python": {"python3", "-c"},
	"node":   {"node", "-e"},
	"bash":   {"bash", "-c"},
}

func (t *tools) addExecTools(r *registry) {
	add(r, &mcpsdk.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run a python, node or bash program and return its exit status, stdout and stderr. " +
			"Without sandbox, a throwaway sandbox is created for the call and terminated after it; " +
			"with sandbox, the program runs there and what it writes to disk stays. Each of stdout and " +
			fmt.Sprintf("stderr is capped at %d bytes: a longer one shows its head and tail around a marked cut, ", t.opts.OutputLimit) +
			"and in a named sandbox the whole output is kept in a file whose path the answer gives (read it with read_file).",
		Annotations: &mcpsdk.ToolAnnotations{OpenWorldHint: boolPtr(true)},
	}, func(s *jsonschema.Schema) {
		setEnum(s, "language", "python", "node", "bash")
		setDefault(s, "timeout_seconds", defaultTimeout)
		setMinimum(s, "timeout_seconds", 1)
	}, t.runCode)
	add(r, &mcpsdk.Tool{
		Name:  "exec",
		Title: "Run a command in a sandbox",
		Description: "Run a command to completion in a sandbox and return its exit status, stdout and stderr. " +
			"Give command (a shell line) or argv. Output is capped like run_code's; the whole of a cut output " +
			"is kept in the sandbox at the path the answer gives.",
		Annotations: &mcpsdk.ToolAnnotations{OpenWorldHint: boolPtr(true)},
	}, func(s *jsonschema.Schema) {
		setDefault(s, "timeout_seconds", defaultTimeout)
		setMinimum(s, "timeout_seconds", 1)
	}, t.exec)
}

func (t *tools) runCode(ctx context.Context, _ *mcpsdk.CallToolRequest, in RunCodeInput) (_ *mcpsdk.CallToolResult, _ ExecOutput, retErr error) {
	interp, ok := interpreters[in.Language]
	if !ok {
		return nil, ExecOutput{}, invalidf("language %q: want python, node or bash", in.Language)
	}
	if in.Code == "" {
		return nil, ExecOutput{}, invalidf("code is empty")
	}
	if len(in.Code) > maxCodeBytes {
		return nil, ExecOutput{}, invalidf("code is %d bytes, more than %d: write it with write_file and run it with exec", len(in.Code), maxCodeBytes)
	}
	if strings.IndexByte(in.Code, 0) >= 0 {
		return nil, ExecOutput{}, invalidf("code contains a NUL byte")
	}
	timeout, err := timeoutOf(in.Timeout)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	req := api.ExecRequest{Argv: append(append([]string{}, interp...), in.Code), Stdin: in.Stdin, Timeout: timeout}
	if in.Sandbox != "" {
		return t.run(ctx, in.Sandbox, false, req)
	}
	name := "mcp-run-" + randomHex(6)
	create := api.CreateSandboxRequest{Name: name, Image: in.Image, Labels: map[string]string{"airlock.mcp": "run_code"}}
	resp, err := t.cl.Create(ctx, create, client.WithIdempotencyKey(name))
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Status < 500 {
		return nil, ExecOutput{}, err // refused: nothing was made
	}
	// From here the sandbox may exist, even if the answer was lost: always terminate it.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), terminateBudget)
		defer cancel()
		if _, err := t.cl.Terminate(ctx, name); err != nil && !client.IsNotFound(err) {
			t.log.Warn("could not terminate a throwaway sandbox", "sandbox", name, "err", err)
			if retErr == nil {
				retErr = fmt.Errorf("the program ran, but its throwaway sandbox %s could not be terminated: %w", name, toolError(err))
			}
		}
	}()
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if sb := resp.Sandbox; sb != nil && sb.State == api.StateFailed {
		return nil, ExecOutput{}, fmt.Errorf("the throwaway sandbox failed to start: %s", sb.Failure)
	}
	return t.run(ctx, name, true, req)
}

func (t *tools) exec(ctx context.Context, _ *mcpsdk.CallToolRequest, in ExecInput) (*mcpsdk.CallToolResult, ExecOutput, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, ExecOutput{}, err
	}
	switch {
	case in.Command == "" && len(in.Argv) == 0:
		return nil, ExecOutput{}, invalidf("give command (a shell line) or argv (a program and its arguments)")
	case in.Command != "" && len(in.Argv) > 0:
		return nil, ExecOutput{}, invalidf("give command or argv, not both")
	case len(in.Argv) > 0 && in.Argv[0] == "":
		return nil, ExecOutput{}, invalidf("argv[0] (the program) is empty")
	}
	if in.Cwd != "" && !path.IsAbs(in.Cwd) {
		return nil, ExecOutput{}, invalidf("cwd %q is not an absolute path", in.Cwd)
	}
	timeout, err := timeoutOf(in.Timeout)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	req := api.ExecRequest{Argv: in.Argv, Shell: in.Command, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, Timeout: timeout}
	return t.run(ctx, in.Sandbox, false, req)
}

// timeoutOf turns timeout_seconds into the API's duration (0: the default).
func timeoutOf(seconds int) (string, error) {
	if seconds < 0 {
		return "", invalidf("timeout_seconds must be positive, not %d", seconds)
	}
	if seconds == 0 {
		seconds = defaultTimeout
	}
	return (time.Duration(seconds) * time.Second).String(), nil
}

// run executes req in the sandbox ref, streaming its output through two captures, and
// keeps a stream that was cut in the sandbox (unless the sandbox is temporary).
func (t *tools) run(ctx context.Context, ref string, temporary bool, req api.ExecRequest) (*mcpsdk.CallToolResult, ExecOutput, error) {
	id := "exec-" + randomHex(6)
	stdout := newCapture(t.opts.OutputLimit, t.opts.MaxFull)
	defer stdout.close()
	stderr := newCapture(t.opts.OutputLimit, t.opts.MaxFull)
	defer stderr.close()
	res, err := t.cl.ExecStream(ctx, ref, req, stdout, stderr)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	out := ExecOutput{Sandbox: ref, Temporary: temporary, ExecID: id, State: res.State, ExitCode: res.ExitCode,
		Signal: res.Signal, DurationMS: res.DurationMS, Error: res.Error}
	out.Stdout = t.stream(ctx, ref, temporary, path.Join(t.opts.OutputDir, id+".stdout"), "stdout", stdout)
	out.Stderr = t.stream(ctx, ref, temporary, path.Join(t.opts.OutputDir, id+".stderr"), "stderr", stderr)
	return textResult(execText(out)), out, nil
}

// stream describes one captured stream and, when it was cut, puts the whole of it into
// the sandbox at full.
func (t *tools) stream(ctx context.Context, ref string, temporary bool, full, name string, c *capture) Stream {
	s := Stream{Bytes: c.total, Truncated: c.truncated()}
	if !s.Truncated {
		s.Text = c.shown("")
		return s
	}
	switch f, size, err := c.fullFile(); {
	case temporary:
		s.FullNote = "the throwaway sandbox is gone; run in a named sandbox (create_sandbox, then run_code with sandbox) to keep the whole output"
	case err != nil:
		s.FullNote = err.Error()
	default:
		if _, err := t.cl.Upload(ctx, ref, full, 0o644, f); err != nil {
			s.FullNote = "the whole output could not be put into the sandbox: " + toolError(err).Error()
			break
		}
		s.FullPath = full
		if size < c.total {
			s.FullNote = fmt.Sprintf("only the first %d bytes were kept", size)
		}
	}
	head, tail := len(c.head()), len(c.tail())
	note := fmt.Sprintf("[airlock: %s truncated: showing the first %d and the last %d of %d bytes; %d bytes cut here.",
		name, head, tail, c.total, c.total-int64(head)-int64(tail))
	if s.FullPath != "" {
		note += fmt.Sprintf(" The whole %s is in sandbox %s at %s: read it with read_file (path, offset, limit).", name, ref, s.FullPath)
	}
	if s.FullNote != "" {
		note += " " + upperFirst(s.FullNote) + "."
	}
	s.Text = c.shown(note + "]")
	return s
}

// execText is the answer's text: how the command ended, then each stream.
func execText(out ExecOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state: %s, exit code %d", out.State, out.ExitCode)
	if out.Signal != "" {
		fmt.Fprintf(&b, ", signal %s", out.Signal)
	}
	fmt.Fprintf(&b, ", %d ms, sandbox %s", out.DurationMS, out.Sandbox)
	if out.Temporary {
		b.WriteString(" (throwaway, now terminated)")
	}
	b.WriteString(", exec id " + out.ExecID + "\n")
	if out.Error != "" {
		b.WriteString("error: " + out.Error + "\n")
	}
	for _, s := range []struct {
		name string
		s    Stream
	}{{"stdout", out.Stdout}, {"stderr", out.Stderr}} {
		if s.s.Bytes == 0 {
			fmt.Fprintf(&b, "--- %s: empty\n", s.name)
			continue
		}
		fmt.Fprintf(&b, "--- %s (%d bytes):\n%s", s.name, s.s.Bytes, s.s.Text)
		if !strings.HasSuffix(s.s.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
