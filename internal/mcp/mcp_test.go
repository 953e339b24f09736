package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/testenv"
)

// The tools run here end to end: the Go SDK's MCP client talks to the server over an
// in-memory transport, and the server calls the real HTTP server, manager and store of
// a node on the fake runtime (testenv.NewFakeNode), whose commands run on the host as
// the test's user with the sandbox's directory as their working directory and the root
// of every file call.

var allTools = []string{"run_code", "exec", "read_file", "write_file", "list_files", "create_sandbox",
	"list_sandboxes", "suspend", "resume", "terminate", "snapshot", "fork", "sandbox_stats", "create_volume", "list_volumes"}

// session connects an MCP client to a server that calls the daemon through cl.
func session(t *testing.T, cl *client.Client, opts mcp.Options) *mcpsdk.ClientSession {
	t.Helper()
	srv, err := mcp.New(cl, opts)
	if err != nil {
		t.Fatalf("mcp.New: %v", err)
	}
	ct, st := mcpsdk.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call calls a tool and fails the test on a protocol error (not on a tool error).
func call(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any) *mcpsdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", tool, args, err)
	}
	return res
}

// callOK calls a tool, fails the test on any error, and decodes its structured result
// into out (when out is not nil); it returns the result's text.
func callOK(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	res := call(t, cs, tool, args)
	text := resultText(res)
	if res.IsError {
		t.Fatalf("%s %v: got tool error %q, want success", tool, args, text)
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode structured content %s: %v", tool, b, err)
		}
	}
	return text
}

// callErr calls a tool and fails the test unless it answers a tool error that contains
// every one of wants; it returns the error's text.
func callErr(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any, wants ...string) string {
	t.Helper()
	res := call(t, cs, tool, args)
	text := resultText(res)
	if !res.IsError {
		t.Fatalf("%s %v: got success %q, want a tool error", tool, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s %v: error %q does not contain %q", tool, args, text, w)
		}
	}
	return text
}

func resultText(res *mcpsdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}

func TestMCPToolsList(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 {
			t.Errorf("tool %s: description %q is too short to guide an agent", tool.Name, tool.Description)
		}
		var schema struct {
			Type       string   `json:"type"`
			Required   []string `json:"required"`
			Properties map[string]struct {
				Description string `json:"description"`
				Enum        []any  `json:"enum"`
			} `json:"properties"`
			AdditionalProperties any `json:"additionalProperties"`
		}
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatalf("tool %s: input schema %s: %v", tool.Name, b, err)
		}
		if schema.Type != "object" {
			t.Errorf("tool %s: input schema type %q, want object", tool.Name, schema.Type)
		}
		for name, p := range schema.Properties {
			if p.Description == "" {
				t.Errorf("tool %s: property %s has no description", tool.Name, name)
			}
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("tool %s: required %s is not a property", tool.Name, r)
			}
		}
		if tool.Name == "run_code" {
			if got := fmt.Sprint(schema.Properties["language"].Enum); got != "[python node bash]" {
				t.Errorf("run_code: language enum = %s, want [python node bash]", got)
			}
			if !slices.Equal(schema.Required, []string{"language", "code"}) {
				t.Errorf("run_code: required = %v, want [language code]", schema.Required)
			}
		}
		if tool.OutputSchema == nil {
			t.Errorf("tool %s has no output schema", tool.Name)
		}
	}
	slices.Sort(names)
	want := slices.Clone(allTools)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func TestMCPSandboxLifecycle(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})

	var created mcp.SandboxOutput
	text := callOK(t, cs, "create_sandbox", map[string]any{"name": "work", "labels": map[string]string{"team": "a"}}, &created)
	if created.Sandbox.Name != "work" || created.Sandbox.State != "running" || created.Sandbox.ID == "" {
		t.Fatalf("create_sandbox: got %+v, want work running with an id", created.Sandbox)
	}
	wantContains(t, "create_sandbox text", text, "work", "running")

	var ex mcp.ExecOutput
	text = callOK(t, cs, "exec", map[string]any{"sandbox": "work", "command": "echo hello; echo oops >&2; exit 3"}, &ex)
	if ex.State != "failed" || ex.ExitCode != 3 || ex.Stdout.Text != "hello\n" || ex.Stderr.Text != "oops\n" || ex.Stdout.Truncated {
		t.Errorf("exec: got %+v, want failed, exit 3, stdout hello, stderr oops", ex)
	}
	wantContains(t, "exec text", text, "exit code 3", "hello", "oops")
	callOK(t, cs, "exec", map[string]any{"sandbox": "work", "argv": []string{"echo", "a b"}}, &ex)
	if ex.State != "succeeded" || ex.Stdout.Text != "a b\n" {
		t.Errorf("exec argv: got %+v, want succeeded with %q", ex, "a b\n")
	}

	var wrote mcp.WriteFileOutput
	callOK(t, cs, "write_file", map[string]any{"sandbox": "work", "path": "/data/hello.py", "content": "print('hi')\n", "mode": "0755"}, &wrote)
	if wrote.Size != 12 || wrote.Mode != "0755" {
		t.Errorf("write_file: got %+v, want 12 bytes, mode 0755", wrote)
	}
	var read mcp.ReadFileOutput
	text = callOK(t, cs, "read_file", map[string]any{"sandbox": "work", "path": "/data/hello.py"}, &read)
	if read.Content != "print('hi')\n" || !read.EOF || read.Size != 12 || read.Encoding != "text" || text != "print('hi')\n" {
		t.Errorf("read_file: got %+v (text %q), want the whole file as text", read, text)
	}
	text = callOK(t, cs, "read_file", map[string]any{"sandbox": "work", "path": "/data/hello.py", "offset": 2, "limit": 4}, &read)
	if read.Content != "int(" || read.EOF || read.NextOffset != 6 {
		t.Errorf("read_file offset 2 limit 4: got %+v, want %q, not at the end, next offset 6", read, "int(")
	}
	wantContains(t, "read_file text", text, "offset=6")
	callOK(t, cs, "write_file", map[string]any{"sandbox": "work", "path": "/data/bin", "content": "AP8=", "encoding": "base64"}, nil)
	callOK(t, cs, "read_file", map[string]any{"sandbox": "work", "path": "/data/bin"}, &read)
	if read.Encoding != "base64" || read.Content != "AP8=" {
		t.Errorf("read_file of binary: got %+v, want base64 AP8=", read)
	}

	var ls mcp.ListFilesOutput
	text = callOK(t, cs, "list_files", map[string]any{"sandbox": "work", "path": "/data"}, &ls)
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"bin", "hello.py"}) || ls.Total != 2 {
		t.Errorf("list_files /data: got %v (total %d), want [bin hello.py]", names, ls.Total)
	}
	wantContains(t, "list_files text", text, "hello.py", "0755")

	var list mcp.ListSandboxesOutput
	callOK(t, cs, "list_sandboxes", map[string]any{"labels": map[string]string{"team": "a"}}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Name != "work" {
		t.Errorf("list_sandboxes team=a: got %+v, want work", list.Sandboxes)
	}

	var snap mcp.SnapshotOutput
	callOK(t, cs, "snapshot", map[string]any{"sandbox": "work"}, &snap)
	if !strings.HasPrefix(snap.Snapshot.ID, "snap_") || snap.Operation == "" {
		t.Fatalf("snapshot: got %+v, want a snap_ id and an operation", snap)
	}
	var forked mcp.SandboxOutput
	callOK(t, cs, "fork", map[string]any{"source": snap.Snapshot.ID, "name": "work-copy"}, &forked)
	if forked.Sandbox.Name != "work-copy" || forked.Sandbox.State != "running" || forked.Sandbox.Parent != snap.Snapshot.ID {
		t.Errorf("fork of %s: got %+v, want work-copy running with that parent", snap.Snapshot.ID, forked.Sandbox)
	}
	callOK(t, cs, "read_file", map[string]any{"sandbox": "work-copy", "path": "/data/hello.py"}, &read)
	if read.Content != "print('hi')\n" {
		t.Errorf("read_file in the fork: got %q, want the snapshot's file", read.Content)
	}
	callOK(t, cs, "fork", map[string]any{"source": "work", "name": "work-two"}, &forked)
	if forked.Sandbox.ForkedFrom == "" {
		t.Errorf("fork of a sandbox: got %+v, want forked_from set", forked.Sandbox)
	}

	var moved mcp.SandboxOutput
	callOK(t, cs, "suspend", map[string]any{"sandbox": "work"}, &moved)
	if moved.Sandbox.State != "suspended" {
		t.Errorf("suspend: state %q, want suspended", moved.Sandbox.State)
	}
	gen := moved.Sandbox.Generation
	callOK(t, cs, "resume", map[string]any{"sandbox": "work"}, &moved)
	if moved.Sandbox.State != "running" || moved.Sandbox.Generation != gen+1 {
		t.Errorf("resume: got state %q generation %d, want running, generation %d", moved.Sandbox.State, moved.Sandbox.Generation, gen+1)
	}
	callOK(t, cs, "read_file", map[string]any{"sandbox": "work", "path": "/data/hello.py"}, &read)
	if read.Content != "print('hi')\n" {
		t.Errorf("read_file after resume: got %q, want the file kept", read.Content)
	}
	for _, name := range []string{"work", "work-copy", "work-two"} {
		callOK(t, cs, "terminate", map[string]any{"sandbox": name}, &moved)
		if moved.Sandbox.State != "terminated" {
			t.Errorf("terminate %s: state %q, want terminated", name, moved.Sandbox.State)
		}
	}
	callOK(t, cs, "list_sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("list_sandboxes after terminate: got %+v, want none", list.Sandboxes)
	}
	callOK(t, cs, "list_sandboxes", map[string]any{"include_terminated": true}, &list)
	if len(list.Sandboxes) != 3 {
		t.Errorf("list_sandboxes include_terminated: got %d sandboxes, want 3", len(list.Sandboxes))
	}
}

// TestMCPCreatePullsImage: create_sandbox and run_code name a registry image that is
// not here yet, and the daemon pulls it.
func TestMCPCreatePullsImage(t *testing.T) {
	reg := testenv.NewRegistry(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.InsecureRegistries = []string{reg.Host} }})
	cs := session(t, n.Client, mcp.Options{})

	ref, _ := reg.PushRandom(t, "team/mcp")
	var created mcp.SandboxOutput
	callOK(t, cs, "create_sandbox", map[string]any{"name": "pulled", "image": ref}, &created)
	if created.Sandbox.State != "running" || created.Sandbox.Image != ref {
		t.Errorf("create_sandbox of an image not pulled yet: %+v, want running on %s", created.Sandbox, ref)
	}
	ref2, _ := reg.PushRandom(t, "team/run")
	var ex mcp.ExecOutput
	callOK(t, cs, "run_code", map[string]any{"language": "bash", "code": "echo ran", "image": ref2}, &ex)
	if ex.State != "succeeded" || ex.Stdout.Text != "ran\n" {
		t.Errorf("run_code on an image not pulled yet: %+v, want it to succeed", ex)
	}
	if _, err := n.Client.Image(context.Background(), ref2); err != nil {
		t.Errorf("run_code's image was not pulled: %v", err)
	}
}

func TestMCPRunCode(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})
	for _, tc := range []struct{ language, code, want string }{
		{"python", "import sys\nprint(6*7)\nprint(sys.stdin.read().upper())", "42\nIN\n\n"},
		{"bash", "echo $((6*7)); read x; echo ${x^^}", "42\nIN\n"},
	} {
		var ex mcp.ExecOutput
		callOK(t, cs, "run_code", map[string]any{"language": tc.language, "code": tc.code, "stdin": "in\n"}, &ex)
		if ex.State != "succeeded" || ex.Stdout.Text != tc.want || !ex.Temporary {
			t.Errorf("run_code %s: got %+v, want succeeded in a throwaway sandbox with stdout %q", tc.language, ex, tc.want)
		}
	}
	var list mcp.ListSandboxesOutput
	callOK(t, cs, "list_sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("after run_code: sandboxes %+v are left, want none", list.Sandboxes)
	}

	callOK(t, cs, "create_sandbox", map[string]any{"name": "py"}, nil)
	var ex mcp.ExecOutput
	callOK(t, cs, "run_code", map[string]any{"language": "python", "code": "open('state.txt','w').write('kept')", "sandbox": "py"}, &ex)
	if ex.State != "succeeded" || ex.Temporary {
		t.Fatalf("run_code in a named sandbox: got %+v", ex)
	}
	var read mcp.ReadFileOutput
	callOK(t, cs, "read_file", map[string]any{"sandbox": "py", "path": "/state.txt"}, &read)
	if read.Content != "kept" {
		t.Errorf("file the program wrote: got %q, want kept", read.Content)
	}
	callOK(t, cs, "run_code", map[string]any{"language": "python", "code": "raise SystemExit('boom')", "sandbox": "py"}, &ex)
	if ex.State != "failed" || ex.ExitCode != 1 || !strings.Contains(ex.Stderr.Text, "boom") {
		t.Errorf("run_code that fails: got %+v, want failed, exit 1, boom on stderr", ex)
	}
	callOK(t, cs, "run_code", map[string]any{"language": "bash", "code": "sleep 30", "sandbox": "py", "timeout_seconds": 1}, &ex)
	if ex.State != "timeout" {
		t.Errorf("run_code past its timeout: got state %q, want timeout", ex.State)
	}
	callOK(t, cs, "terminate", map[string]any{"sandbox": "py"}, nil)
}

func TestMCPTruncation(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	const limit = 4096
	cs := session(t, n.Client, mcp.Options{OutputLimit: limit, ReadLimit: 10000})
	callOK(t, cs, "create_sandbox", map[string]any{"name": "big"}, nil)

	// 20000 lines "line NNNNN" on stdout, and a short stderr.
	const lines = 20000
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %05d\n", i)
	}
	var ex mcp.ExecOutput
	text := callOK(t, cs, "exec", map[string]any{"sandbox": "big", "command": fmt.Sprintf("for i in $(seq 0 %d); do printf 'line %%05d\\n' $i; done; echo small >&2", lines-1)}, &ex)
	out := ex.Stdout
	if !out.Truncated || out.Bytes != int64(want.Len()) || out.FullPath == "" || out.FullNote != "" {
		t.Fatalf("stdout: got truncated=%v bytes=%d path=%q note=%q, want truncated, %d bytes, a full path",
			out.Truncated, out.Bytes, out.FullPath, out.FullNote, want.Len())
	}
	if ex.Stderr.Truncated || ex.Stderr.Text != "small\n" {
		t.Errorf("stderr: got %+v, want small, not truncated", ex.Stderr)
	}
	if len(out.Text) > limit+600 {
		t.Errorf("stdout shown: %d bytes, want about the limit %d", len(out.Text), limit)
	}
	if !strings.HasPrefix(out.Text, "line 00000\nline 00001\n") || !strings.HasSuffix(out.Text, fmt.Sprintf("line %05d\n", lines-1)) {
		t.Errorf("stdout shown: want the head and the tail, got %q...%q", out.Text[:40], out.Text[len(out.Text)-40:])
	}
	wantContains(t, "exec text", text, "[airlock: stdout truncated", out.FullPath, "read_file", "/tmp/airlock-mcp/"+ex.ExecID+".stdout")

	// The whole output comes back through read_file, window by window.
	var got strings.Builder
	var off int64
	for calls := 0; ; calls++ {
		if calls > 40 {
			t.Fatal("read_file: too many windows")
		}
		var read mcp.ReadFileOutput
		callOK(t, cs, "read_file", map[string]any{"sandbox": "big", "path": out.FullPath, "offset": off, "limit": 1 << 20}, &read)
		if read.Length > 10000 {
			t.Fatalf("read_file returned %d bytes, more than the read cap 10000", read.Length)
		}
		got.WriteString(read.Content)
		if read.EOF {
			break
		}
		off = read.NextOffset
	}
	if got.String() != want.String() {
		t.Errorf("full output read back: %d bytes, differs from the %d bytes written", got.Len(), want.Len())
	}

	// A throwaway sandbox keeps nothing, and says so.
	ex = mcp.ExecOutput{}
	callOK(t, cs, "run_code", map[string]any{"language": "python", "code": "print('x' * 50000)"}, &ex)
	if !ex.Stdout.Truncated || ex.Stdout.FullPath != "" || !strings.Contains(ex.Stdout.Text, "throwaway") {
		t.Errorf("run_code in a throwaway sandbox: got truncated=%v path=%q text %q, want truncated, no path, a note",
			ex.Stdout.Truncated, ex.Stdout.FullPath, ex.Stdout.Text[limit/2-10:limit/2+300])
	}
	callOK(t, cs, "terminate", map[string]any{"sandbox": "big"}, nil)
}

func TestMCPBadArguments(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})
	callOK(t, cs, "create_sandbox", map[string]any{"name": "ok"}, nil)
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		wants []string
	}{
		{"run_code", map[string]any{"language": "cobol", "code": "x"}, []string{"language"}},
		{"run_code", map[string]any{"code": "print(1)"}, []string{"language"}},
		{"run_code", map[string]any{"language": "python", "code": "1", "colour": "red"}, []string{"colour"}},
		{"run_code", map[string]any{"language": "python", "code": ""}, []string{"code is empty"}},
		{"exec", map[string]any{"sandbox": "ok"}, []string{"command", "argv"}},
		{"exec", map[string]any{"sandbox": "ok", "command": "true", "argv": []string{"true"}}, []string{"not both"}},
		{"exec", map[string]any{"sandbox": "ok", "command": "true", "timeout_seconds": -1}, []string{"timeout_seconds"}},
		{"exec", map[string]any{"sandbox": "nope", "command": "true"}, []string{"nope", "not_found"}},
		{"exec", map[string]any{"sandbox": "", "command": "true"}, []string{"sandbox is empty"}},
		{"read_file", map[string]any{"sandbox": "ok", "path": "relative.txt"}, []string{"absolute"}},
		{"read_file", map[string]any{"sandbox": "ok", "path": "/missing"}, []string{"not_found"}},
		{"read_file", map[string]any{"sandbox": "ok", "path": "/"}, []string{"directory"}},
		{"read_file", map[string]any{"sandbox": "ok", "path": "/x", "offset": "ten"}, []string{"offset"}},
		{"write_file", map[string]any{"sandbox": "ok", "path": "/x", "content": "!", "encoding": "base64"}, []string{"base64"}},
		{"write_file", map[string]any{"sandbox": "ok", "path": "/x", "content": "", "mode": "999"}, []string{"mode"}},
		{"create_sandbox", map[string]any{"name": "Bad_Name"}, []string{"name"}},
		{"create_sandbox", map[string]any{"name": "ok"}, []string{"already_exists"}},
		{"create_sandbox", map[string]any{"name": "n2", "idle_suspend": "soon"}, []string{"invalid_argument"}},
		{"fork", map[string]any{"source": "snap_nothing", "name": "f"}, []string{"not_found"}},
		{"suspend", map[string]any{}, []string{"sandbox"}},
		{"list_sandboxes", map[string]any{"states": []string{"sleeping"}}, []string{"states"}},
	} {
		text := callErr(t, cs, tc.tool, tc.args, tc.wants...)
		t.Logf("%s %v: %s", tc.tool, tc.args, text)
		// The server is still there and answers the next call.
		var list mcp.ListSandboxesOutput
		callOK(t, cs, "list_sandboxes", nil, &list)
		if len(list.Sandboxes) != 1 {
			t.Fatalf("after %s %v: sandboxes %+v, want only ok", tc.tool, tc.args, list.Sandboxes)
		}
	}
	callOK(t, cs, "terminate", map[string]any{"sandbox": "ok"}, nil)
}

func TestMCPIdentities(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	as := func(owner string) *mcpsdk.ClientSession {
		cl, err := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, owner)})
		if err != nil {
			t.Fatal(err)
		}
		return session(t, cl, mcp.Options{})
	}
	alice, bob := as("alice"), as("bob")
	var created mcp.SandboxOutput
	callOK(t, alice, "create_sandbox", map[string]any{"name": "secret-work"}, &created)
	callOK(t, alice, "write_file", map[string]any{"sandbox": "secret-work", "path": "/notes.txt", "content": "alice's"}, nil)

	var list mcp.ListSandboxesOutput
	callOK(t, bob, "list_sandboxes", map[string]any{"include_terminated": true}, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("bob's list_sandboxes: got %+v, want none of alice's", list.Sandboxes)
	}
	for _, ref := range []string{"secret-work", created.Sandbox.ID} {
		callErr(t, bob, "exec", map[string]any{"sandbox": ref, "command": "true"}, "not_found")
		callErr(t, bob, "read_file", map[string]any{"sandbox": ref, "path": "/notes.txt"}, "not_found")
		callErr(t, bob, "terminate", map[string]any{"sandbox": ref}, "not_found")
		callErr(t, bob, "fork", map[string]any{"source": ref, "name": "stolen"}, "not_found")
	}
	// Bob's own sandbox of the same name is his, and alice's is untouched.
	callOK(t, bob, "create_sandbox", map[string]any{"name": "secret-work"}, nil)
	callErr(t, bob, "read_file", map[string]any{"sandbox": "secret-work", "path": "/notes.txt"}, "not_found")
	var read mcp.ReadFileOutput
	callOK(t, alice, "read_file", map[string]any{"sandbox": "secret-work", "path": "/notes.txt"}, &read)
	if read.Content != "alice's" {
		t.Errorf("alice's file: got %q", read.Content)
	}
	callOK(t, bob, "terminate", map[string]any{"sandbox": "secret-work"}, nil)
	callOK(t, alice, "terminate", map[string]any{"sandbox": "secret-work"}, nil)
}

func TestMCPDaemonUnreachable(t *testing.T) {
	cl, err := client.New(client.Options{Socket: t.TempDir() + "/none.sock"})
	if err != nil {
		t.Fatal(err)
	}
	cs := session(t, cl, mcp.Options{})
	callErr(t, cs, "list_sandboxes", nil, "unavailable", "daemon running")
	callErr(t, cs, "run_code", map[string]any{"language": "bash", "code": "true"}, "unavailable")
}

// TestMCPWorkspaceOnlyOverStdio: create_sandbox passes a workspace on to the daemon only
// when the server says its client is local (stdio); otherwise it refuses it itself.
func TestMCPWorkspaceOnlyOverStdio(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	remote := session(t, n.Client, mcp.Options{})
	callErr(t, remote, "create_sandbox", map[string]any{"name": "ws", "workspace": t.TempDir()}, "only when airlock mcp runs over stdio")
	local := session(t, n.Client, mcp.Options{HostWorkspaces: true})
	callErr(t, local, "create_sandbox", map[string]any{"name": "ws", "workspace": "rel/dir"}, "absolute path")
	// The fake node mounts none: the refusal is the daemon's, so the request reached it.
	callErr(t, local, "create_sandbox", map[string]any{"name": "ws", "workspace": t.TempDir(), "workspace_read_only": true}, "mounts no host workspaces")
}

// sandbox_stats shows a sandbox's usage against its limits, structured and as text.
func TestMCPSandboxStats(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})
	callOK(t, cs, "create_sandbox", map[string]any{"name": "st"}, nil)
	var st api.SandboxStats
	text := callOK(t, cs, "sandbox_stats", map[string]any{"sandbox": "st"}, &st)
	if st.Name != "st" || st.State != "running" || st.Memory.UsedBytes != 1<<20 || st.PIDs.Current != 1 {
		t.Errorf("sandbox_stats = %+v; want st running with the fake's 1 MiB and 1 process", st)
	}
	wantContains(t, "sandbox_stats text", text, "st (", "memory: 1 MiB", "processes: 1")
	if res := call(t, cs, "sandbox_stats", map[string]any{"sandbox": "nosuch"}); !res.IsError {
		t.Errorf("sandbox_stats of no sandbox: %q; want a tool error", resultText(res))
	}
}

// TestMCPVolumes: create_volume makes a volume that list_volumes shows, and
// create_sandbox attaches it.
func TestMCPVolumes(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	cs := session(t, n.Client, mcp.Options{})
	var v mcp.VolumeInfo
	callOK(t, cs, "create_volume", map[string]any{"name": "data", "size_mb": 16}, &v)
	if v.Name != "data" || v.Size != 16<<20 || v.ID == "" {
		t.Fatalf("create_volume: got %+v, want data of 16 MiB with an id", v)
	}
	var created mcp.SandboxOutput
	callOK(t, cs, "create_sandbox", map[string]any{"name": "w", "volumes": []map[string]any{{"name": "data", "path": "/data"}}}, &created)
	var list mcp.ListVolumesOutput
	callOK(t, cs, "list_volumes", map[string]any{}, &list)
	if len(list.Volumes) != 1 || len(list.Volumes[0].Attached) != 1 || !strings.HasPrefix(list.Volumes[0].Attached[0], created.Sandbox.ID+":/data:rw") {
		t.Errorf("list_volumes: got %+v, want data attached to %s at /data", list.Volumes, created.Sandbox.ID)
	}
	if _, err := n.Client.Terminate(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	if err := n.Client.DeleteVolume(context.Background(), "data"); err != nil {
		t.Fatal(err)
	}
}
