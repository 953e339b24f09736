package integration

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2BControlPlane starts a daemon with e2b_listen and drives the E2B-compatible
// control plane over HTTP with an E2B-format key, as E2B's SDKs would: a real sandbox
// is created from the base template, read back, paused, resumed and killed.
func TestE2BControlPlane(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	d := startDaemonB(t, "e2b_listen: 127.0.0.1:"+port)
	d.must("user", "create", "dev", "--role", "developer")
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(d.must("token", "create", "--user", "dev", "--format", "e2b", "-o", "json")), &tok); err != nil || !strings.HasPrefix(tok.Secret, "e2b_") {
		t.Fatalf("token create --format e2b: %+v, %v", tok, err)
	}
	base := "http://127.0.0.1:" + port
	hc := &http.Client{Timeout: time.Minute}
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", tok.Secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return b
	}
	var sb struct{ SandboxID string }
	json.Unmarshal(call("POST", "/sandboxes", `{"templateID":"base","timeout":600,"metadata":{"via":"e2b"}}`, 201), &sb)
	if !strings.HasPrefix(sb.SandboxID, "sb_") {
		t.Fatalf("created %+v", sb)
	}
	if got := call("GET", "/sandboxes/"+sb.SandboxID, "", 200); !strings.Contains(string(got), `"via":"e2b"`) {
		t.Errorf("get: %s, want its metadata", got)
	}
	// The lifetime moves later while it runs: the agent in the container takes it.
	call("POST", "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":7200}`, 204)
	if out := d.must("exec", sb.SandboxID, "--", "echo", "still"); strings.TrimSpace(out) != "still" {
		t.Errorf("after the extension the sandbox runs %q", out)
	}
	call("POST", "/sandboxes/"+sb.SandboxID+"/pause", "", 204)
	call("POST", "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":600}`, 201)
	if out := d.must("exec", sb.SandboxID, "--", "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("the resumed sandbox runs %q, want alive", out)
	}
	call("DELETE", "/sandboxes/"+sb.SandboxID, "", 204)
	req, _ := http.NewRequest("GET", base+"/sandboxes", nil)
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a call with no key = %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}
}
