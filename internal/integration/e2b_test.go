package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestE2BControlPlane starts a daemon with e2b_listen and drives the E2B-compatible
// control plane over HTTP with an E2B-format key, as E2B's SDKs would: a real sandbox
// is created from the base template, read back, paused, resumed and killed.
func TestE2BControlPlane(t *testing.T) {
	n := startE2BDaemon(t)
	key := n.userKey(t, "dev")
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		code, b := n.control(t, key, method, path, body)
		if code != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
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
	if out := n.d.must("exec", sb.SandboxID, "--", "echo", "still"); strings.TrimSpace(out) != "still" {
		t.Errorf("after the extension the sandbox runs %q", out)
	}
	call("POST", "/sandboxes/"+sb.SandboxID+"/pause", "", 204)
	call("POST", "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":600}`, 201)
	if out := n.d.must("exec", sb.SandboxID, "--", "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("the resumed sandbox runs %q, want alive", out)
	}
	call("DELETE", "/sandboxes/"+sb.SandboxID, "", 204)
	if code, body := n.control(t, "", "GET", "/sandboxes", ""); code != http.StatusUnauthorized {
		t.Errorf("a call with no key = %d %s; want 401", code, body)
	}
}
