package cli

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/testenv"
)

// The tests run airlock mcp in process, with the server airlockd gives the verb.
func init() {
	ServeMCP = func(ctx context.Context, cl *client.Client, f MCPFlags, in io.Reader, out io.Writer, log *slog.Logger) error {
		return mcp.Serve(ctx, cl, mcp.Options{Version: "test", OutputLimit: f.MaxOutput, ReadLimit: f.MaxRead, Logger: log,
			HostWorkspaces: f.HostWorkspaces}, mcp.Listener{Addr: f.Listen, Token: f.Token, In: in, Out: out})
	}
}

// mcpCall calls a tool and fails the test unless it succeeds; it returns the text.
func mcpCall(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s: tool error %q", tool, text.String())
	}
	return text.String()
}

// TestMCPVerbStdio runs `airlock mcp` in process with pipes for its standard streams
// and drives it with the Go SDK's client: the protocol on stdout, and a clean end when
// the client goes away.
func TestMCPVerbStdio(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	done := make(chan error, 1)
	go func() {
		err := Run(context.Background(), []string{"--socket", n.Socket, "mcp"}, inR, outW, &stderr)
		outW.Close()
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "0"}, nil).
		Connect(ctx, &mcpsdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if len(tools.Tools) != 15 {
		t.Errorf("tools/list: %d tools, want 15", len(tools.Tools))
	}
	wantContains(t, "run_code", mcpCall(t, cs, "run_code", map[string]any{"language": "bash", "code": "echo from-bash"}), "from-bash", "exit code 0")
	cs.Close() // closes stdin: the server ends
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlock mcp ended with %v, want nil; stderr:\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("airlock mcp did not end when its client closed stdin")
	}
}

// TestMCPVerbStdinClosed: requests piped in, then the end of standard input, as
// `printf ... | airlock mcp` does: every request read is answered, then the command ends.
func TestMCPVerbStdinClosed(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"0"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"bash","code":"echo from-pipe"}}}
`
	var out, stderr strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), []string{"--socket", n.Socket, "mcp"}, strings.NewReader(in), &out, &stderr)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("airlock mcp ended with %v, want nil; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("airlock mcp did not end after its standard input closed")
	}
	got := out.String()
	for _, id := range []string{`"id":1,`, `"id":2,`, `"id":3,`} {
		if !strings.Contains(got, id) {
			t.Errorf("no answer with %s; stdout:\n%s", id, got)
		}
	}
	wantContains(t, "answers", got, `"serverInfo"`, `"run_code"`, "from-pipe")
}

// TestMCPVerbHTTP serves streamable HTTP on a loopback port with a token.
func TestMCPVerbHTTP(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	errR, errW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := Run(ctx, []string{"--socket", n.Socket, "mcp", "--listen", "127.0.0.1:0", "--listen-token", "s3cret"}, strings.NewReader(""), io.Discard, errW)
		errW.Close()
		done <- err
	}()
	urlRE := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/mcp)`)
	var url string
	lines := bufio.NewScanner(errR)
	for url == "" && lines.Scan() {
		if m := urlRE.FindStringSubmatch(lines.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatalf("airlock mcp --listen did not log its URL: %v", <-done)
	}
	go io.Copy(io.Discard, errR)

	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without the token: status %d, want 401", resp.StatusCode)
	}

	hc := &http.Client{Transport: bearer{"s3cret", http.DefaultTransport}}
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "0"}, nil).
		Connect(cctx, &mcpsdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	mcpCall(t, cs, "create_sandbox", map[string]any{"name": "over-http"})
	wantContains(t, "exec", mcpCall(t, cs, "exec", map[string]any{"sandbox": "over-http", "argv": []string{"echo", "via", "http"}}), "via http")
	wantContains(t, "list_sandboxes", mcpCall(t, cs, "list_sandboxes", nil), "over-http")
	mcpCall(t, cs, "terminate", map[string]any{"sandbox": "over-http"})
	cs.Close()

	cancel() // as on Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlock mcp --listen ended with %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("airlock mcp --listen did not end when interrupted")
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8080", "", true},
		{"[::1]:8080", "", true},
		{"localhost:0", "", true},
		{"0.0.0.0:8080", "", false},
		{":8080", "", false},
		{"192.0.2.1:8080", "", false},
		{"0.0.0.0:8080", "t", true},
		{"no-port", "t", false},
	} {
		err := checkListen(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("checkListen(%q, token %q) = %v, want ok %v", tc.addr, tc.token, err, tc.ok)
		}
	}
}
