package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsoleVerbPassesOnlyTheConsole: airlock console serves the socket's console on a
// loopback port, and never the API, which the socket would answer as this user.
func TestConsoleVerbPassesOnlyTheConsole(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	daemon := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") || !strings.HasPrefix(r.URL.Path, "/console/") && r.URL.Path != "/" {
			io.WriteString(w, `{"version":"test"}`) // the API, or /metrics: answered as the socket's uid
			return
		}
		io.WriteString(w, "console page, host "+r.Host)
	})}
	go daemon.Serve(l)
	defer daemon.Close()

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, []string{"console", "--socket", sock}, nil, pw, io.Discard) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("airlock console printed %q, want an http://127.0.0.1:PORT/ URL", line)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(strings.TrimSuffix(url, "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/"); code != 200 || body != "console page, host "+strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/") {
		t.Errorf("GET /: got %d %q, want the console's page with the local Host kept", code, body)
	}
	for _, p := range []string{"/v1/status", "/v1", "/v1/sandboxes", "/metrics", "/console/../metrics", "/console/%2e%2e/v1/status", "//v1/status"} {
		if code, body := get(p); code != http.StatusNotFound || strings.Contains(body, "version") {
			t.Errorf("GET %s: got %d %q, want 404: the API is not passed", p, code, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlock console ended with %v, want nil on interrupt", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("airlock console did not end on interrupt")
	}
}
