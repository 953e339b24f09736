package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/testenv"
)

// `airlock mcp` is driven here as MCP clients drive it: a child process speaking the
// protocol on its standard streams, in front of a node with real runc sandboxes.

// mcpStdio starts `airlock mcp` for the node's socket and connects the Go SDK's client
// to it over the child's stdin and stdout. Closing the session must end the child
// cleanly (exit status 0), which the cleanup checks.
func mcpStdio(t *testing.T, n *testenv.Node) *mcpsdk.ClientSession {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), "mcp", "--socket", n.Socket)
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "integration", Version: "0"}, nil).
		Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start airlock mcp: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("airlock mcp did not end cleanly when its stdin closed: %v\nstderr:\n%s", err, stderr)
		}
	})
	return cs
}

// mcpTool calls a tool, fails the test on any error, and decodes the structured result
// into out (when not nil).
func mcpTool(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcpsdk.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		t.Fatalf("%s %v: tool error %q", tool, args, strings.Join(text, "\n"))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", tool, b, err)
		}
	}
}

func TestMCPStdioRunCode(t *testing.T) {
	n := testenv.NewNode(t)
	cs := mcpStdio(t, n)

	var ex mcp.ExecOutput
	mcpTool(t, cs, "run_code", map[string]any{"language": "python",
		"code": "import os, sys\nprint(6 * 7)\nprint(sys.version_info.major)\nprint(os.getuid())\nsys.stderr.write('to stderr\\n')"}, &ex)
	if ex.State != api.ExecSucceeded || ex.Stdout.Text != "42\n3\n0\n" || ex.Stderr.Text != "to stderr\n" || !ex.Temporary {
		t.Errorf("run_code python: got %+v, want succeeded in a throwaway sandbox with stdout 42, 3, 0", ex)
	}
	// It ran in a sandbox of its own, which is gone now.
	sb, err := n.Client.Get(background, ex.Sandbox)
	if err != nil || sb.State != api.StateTerminated {
		t.Errorf("the throwaway sandbox %s: got %v, %v, want it terminated", ex.Sandbox, sb, err)
	}

	for _, tc := range []struct{ language, code, want string }{
		{"bash", "x=6; echo $((x * 7))", "42\n"},
		{"node", "console.log(6 * 7)", "42\n"},
	} {
		if _, err := os.Stat("/usr/bin/" + tc.language); err != nil {
			continue // the host image is the host's /usr: no node there, no node in it
		}
		ex = mcp.ExecOutput{}
		mcpTool(t, cs, "run_code", map[string]any{"language": tc.language, "code": tc.code}, &ex)
		if ex.State != api.ExecSucceeded || ex.Stdout.Text != tc.want {
			t.Errorf("run_code %s: got %+v, want stdout %q", tc.language, ex, tc.want)
		}
	}
}

func TestMCPStdioNamedSandbox(t *testing.T) {
	n := testenv.NewNode(t)
	cs := mcpStdio(t, n)
	name := "mcp-" + randHex(4)
	mcpTool(t, cs, "create_sandbox", map[string]any{"name": name}, nil)
	defer n.Client.Terminate(background, name)

	// A program whose output is cut: the whole of it is in the sandbox's /tmp.
	var ex mcp.ExecOutput
	mcpTool(t, cs, "run_code", map[string]any{"sandbox": name, "language": "python",
		"code": "open('/root/kept.txt', 'w').write('kept\\n')\nfor i in range(20000): print('line %05d' % i)"}, &ex)
	if ex.State != api.ExecSucceeded || !ex.Stdout.Truncated || ex.Stdout.FullPath == "" {
		t.Fatalf("run_code with long output: got state %s truncated %v path %q note %q", ex.State, ex.Stdout.Truncated, ex.Stdout.FullPath, ex.Stdout.FullNote)
	}
	if !strings.Contains(ex.Stdout.Text, "[airlock: stdout truncated") || !strings.HasSuffix(ex.Stdout.Text, "line 19999\n") {
		t.Errorf("stdout shown: want a marked cut and the tail, got %d bytes", len(ex.Stdout.Text))
	}
	var read mcp.ReadFileOutput
	mcpTool(t, cs, "read_file", map[string]any{"sandbox": name, "path": ex.Stdout.FullPath, "offset": 11 * 19999}, &read)
	if read.Content != "line 19999\n" || !read.EOF || read.Size != ex.Stdout.Bytes {
		t.Errorf("read_file of the last line of %s: got %+v", ex.Stdout.FullPath, read)
	}
	full, size := ex.Stdout.FullPath, ex.Stdout.Bytes
	ex = mcp.ExecOutput{}
	mcpTool(t, cs, "exec", map[string]any{"sandbox": name, "argv": []string{"wc", "-c", full}}, &ex)
	if want := fmt.Sprintf("%d %s\n", size, full); ex.Stdout.Text != want {
		t.Errorf("wc -c %s in the sandbox: got %q, want %q", full, ex.Stdout.Text, want)
	}

	// Files outside /tmp survive a suspension.
	mcpTool(t, cs, "suspend", map[string]any{"sandbox": name}, nil)
	mcpTool(t, cs, "resume", map[string]any{"sandbox": name}, nil)
	mcpTool(t, cs, "read_file", map[string]any{"sandbox": name, "path": "/root/kept.txt"}, &read)
	if read.Content != "kept\n" {
		t.Errorf("/root/kept.txt after suspend and resume: got %q, want kept", read.Content)
	}
	mcpTool(t, cs, "terminate", map[string]any{"sandbox": name}, nil)
}

// inspectorVersion pins @modelcontextprotocol/inspector-cli, the CLI mode of the MCP
// Inspector.
const inspectorVersion = "1.0.3"

// inspectorCLI returns the path of the Inspector's CLI package (see npmPackage).
func inspectorCLI(t *testing.T) string {
	t.Helper()
	return npmPackage(t, "@modelcontextprotocol/inspector-cli", inspectorVersion)
}

// inspect runs the Inspector's CLI mode against `airlock mcp` (for the node's socket)
// and returns its standard output, failing the test if it fails or takes too long.
func inspect(t *testing.T, pkg string, n *testenv.Node, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{filepath.Join(pkg, "build", "cli.js"), "--cli", testenv.Binary(t), "mcp"}, args...)
	cmd := exec.CommandContext(ctx, "node", argv...)
	// Version 1.0.3 finds its own package.json relative to the working directory.
	cmd.Dir = filepath.Join(pkg, "build")
	cmd.Env = append(os.Environ(), "AIRLOCK_SOCKET="+n.Socket)
	// The Inspector starts node, which starts airlock: end them all on a timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inspector %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, &stderr)
	}
	return out
}

func TestMCPInspectorCLI(t *testing.T) {
	n := testenv.NewNode(t)
	pkg := inspectorCLI(t)

	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	out := inspect(t, pkg, n, "--method", "tools/list")
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("tools/list: %v\n%s", err, out)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || !bytes.Contains(tool.InputSchema, []byte(`"description"`)) {
			t.Errorf("tool %s: want a description and described properties, got %q %s", tool.Name, tool.Description, tool.InputSchema)
		}
	}
	want := []string{"create_sandbox", "create_volume", "exec", "fork", "list_files", "list_sandboxes", "list_volumes", "read_file",
		"resume", "run_code", "sandbox_stats", "snapshot", "suspend", "terminate", "write_file"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools/list: got %v, want %v", names, want)
	}

	type callResult struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent mcp.ExecOutput `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	}
	var res callResult
	out = inspect(t, pkg, n, "--method", "tools/call", "--tool-name", "run_code",
		"--tool-arg", "language=python", "code=import sys; print(6 * 7, sys.version_info.major)", "timeout_seconds=60")
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tools/call run_code: %v\n%s", err, out)
	}
	ex := res.StructuredContent
	if res.IsError || ex.State != api.ExecSucceeded || ex.Stdout.Text != "42 3\n" || len(res.Content) == 0 ||
		!strings.Contains(res.Content[0].Text, "42 3") {
		t.Errorf("tools/call run_code: got %s, want 42 3 on stdout", out)
	}

	res = callResult{}
	out = inspect(t, pkg, n, "--method", "tools/call", "--tool-name", "run_code",
		"--tool-arg", "language=cobol", "code=DISPLAY 42")
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tools/call run_code cobol: %v\n%s", err, out)
	}
	if !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "language") {
		t.Errorf("tools/call run_code language=cobol: got %s, want a tool error about language", out)
	}

	list2, err := n.Client.List(background, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list2 {
		if sb.State != api.StateTerminated {
			t.Errorf("sandbox %s is left %s after the Inspector's calls", sb.Name, sb.State)
		}
	}
}
