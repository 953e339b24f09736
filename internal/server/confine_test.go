package server_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestSessionCredentialIsConfined calls the API as code inside a sandbox (through the
// entry the egress proxy uses, with the sandbox's session token): it reaches its own
// sandbox and the ones it creates, never its owner's other sandboxes, and never
// tokens, secrets, the audit log or administration, whatever its owner's role allows.
func TestSessionCredentialIsConfined(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	a := createSandbox(t, n, "inside")
	b := createSandbox(t, n, "sibling")
	token, err := n.Auth.SessionToken(ctx, "local", "", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	call := func(from, tok, method, path, body string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		n.Server.ServeFromSandbox(w, r, from)
		return w.Code, w.Body.String()
	}
	want := func(what string, code int, gotCode int, body string) {
		t.Helper()
		if gotCode != code {
			t.Errorf("%s: HTTP %d (%s), want %d", what, gotCode, strings.TrimSpace(body), code)
		}
	}

	code, body := call(a.ID, token, "GET", "/v1/whoami", "")
	want("whoami", 200, code, body)
	var who api.WhoAmI
	json.Unmarshal([]byte(body), &who)
	if who.User != "local" || who.Sandbox != a.ID {
		t.Errorf("whoami from inside = %+v", who)
	}
	code, body = call(a.ID, "", "GET", "/v1/whoami", "")
	want("no credential", 401, code, body)
	code, body = call(b.ID, token, "GET", "/v1/whoami", "")
	want("another sandbox's session token", 401, code, body)

	code, body = call(a.ID, token, "GET", "/v1/sandboxes/"+a.Name, "")
	want("its own sandbox", 200, code, body)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/" + b.Name},
		{"GET", "/v1/sandboxes/" + b.ID},
		{"DELETE", "/v1/sandboxes/" + b.Name},
		{"POST", "/v1/sandboxes/" + b.Name + "/suspend"},
		{"GET", "/v1/events?sandbox=" + b.Name},
	} {
		code, body = call(a.ID, token, c.method, c.path, "")
		want(c.method+" "+c.path+" (a sibling)", 404, code, body)
	}
	if got, err := n.Client.Get(ctx, b.Name); err != nil || got.State != "running" {
		t.Fatalf("the sibling after the refused calls: %+v, %v", got, err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/tokens", `{"user":"local","name":"escape"}`},
		{"GET", "/v1/tokens", ""},
		{"POST", "/v1/secrets", `{"name":"s","type":"token","allowed_hosts":["a.example"],"value":"v"}`},
		{"POST", "/v1/secrets/s/bindings", `{"sandbox":"inside","target":"S"}`},
		{"GET", "/v1/audit", ""},
		{"POST", "/v1/registries/login", `{"registry":"ghcr.io","username":"u","password":"p"}`},
		{"GET", "/v1/users", ""},
		{"POST", "/v1/gc", ""},
		{"GET", "/v1/events", ""},
	} {
		code, body = call(a.ID, token, c.method, c.path, c.body)
		want(c.method+" "+c.path, 403, code, body)
	}

	// What it creates, it reaches; the listing shows only those.
	code, body = call(a.ID, token, "POST", "/v1/sandboxes", `{"name":"child"}`)
	want("create a child", 201, code, body)
	code, body = call(a.ID, token, "GET", "/v1/sandboxes/child", "")
	want("its child", 200, code, body)
	code, body = call(a.ID, token, "GET", "/v1/sandboxes", "")
	want("list", 200, code, body)
	var list api.SandboxList
	json.Unmarshal([]byte(body), &list)
	var names []string
	for _, sb := range list.Sandboxes {
		names = append(names, sb.Name)
	}
	if strings.Join(names, ",") != "child,inside" && strings.Join(names, ",") != "inside,child" {
		t.Errorf("the list from inside shows %v, want inside and child only", names)
	}
}

// createSandbox creates a sandbox on the fake node as its administrator.
func createSandbox(t *testing.T, n *testenv.FakeNode, name string) *api.Sandbox {
	t.Helper()
	resp, err := n.Client.Create(context.Background(), api.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Sandbox
}
