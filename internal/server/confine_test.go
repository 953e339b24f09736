package server_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/server"
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
	var made api.OperationResponse
	json.Unmarshal([]byte(body), &made)
	code, body = call(a.ID, token, "GET", "/v1/operations/"+made.Operation.ID, "")
	want("its child's operation", 200, code, body)
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

// TestConfinementMatrix calls every API route, generated from the server's route table,
// as code inside sandbox A whose owner also holds sandbox B, B's snapshot and operation,
// and a secret bound to B. Named after B (or its snapshot, operation, secret), a route is
// refused and leaks nothing of B's it was not given; named after A, a reading route
// answers nothing of B's. A route the table does not classify fails here.
func TestConfinementMatrix(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	a := createSandbox(t, n, "inside-a7")
	bResp, err := n.Client.Create(ctx, api.CreateSandboxRequest{Name: "sibling-b9"}, client.WithIdempotencyKey("the-owners-key"))
	if err != nil {
		t.Fatal(err)
	}
	b := bResp.Sandbox
	snapOf := func(ref string) *api.OperationResponse {
		resp, err := n.Client.Snapshot(ctx, ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	aSnap, bSnap := snapOf(a.Name), snapOf(b.Name)
	sec, err := n.Client.CreateSecret(ctx, api.CreateSecretRequest{Name: "owners-secret-k4", Type: "token",
		AllowedHosts: []string{"api.example.com"}, Value: "sk-live-0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.BindSecret(ctx, sec.Name, api.BindSecretRequest{Sandbox: b.Name, Target: "TOKEN"}); err != nil {
		t.Fatal(err)
	}
	token, err := n.Auth.SessionToken(ctx, "local", "", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// What code inside A must never learn, unless it named it itself.
	hidden := map[string]string{"B's id": b.ID, "B's name": b.Name, "B's snapshot": bSnap.Snapshot.ID,
		"B's operation": bResp.Operation.ID, "B's snapshot operation": bSnap.Operation.ID, "the secret's name": sec.Name,
		"the secret's preview": sec.Versions[0].Preview, "the secret's fingerprint": sec.Versions[0].Fingerprint}

	type target struct{ ref, snapshot, operation, query string }
	aims := map[string]target{
		"B":       {b.Name, bSnap.Snapshot.ID, bResp.Operation.ID, b.Name},
		"B by id": {b.ID, bSnap.Snapshot.ID, bSnap.Operation.ID, b.ID},
		"A":       {a.Name, aSnap.Snapshot.ID, aSnap.Operation.ID, a.Name},
	}
	param := regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)
	reach := (&server.Server{}).RouteReach()
	for _, route := range slices.Sorted(maps.Keys(reach)) {
		class := reach[route]
		if class == "" {
			t.Errorf("%s: the route table does not say how far a request from inside a sandbox goes on it", route)
			continue
		}
		method, pattern, _ := strings.Cut(route, " ")
		for _, aim := range slices.Sorted(maps.Keys(aims)) {
			to := aims[aim]
			if aim == "A" && method != "GET" {
				continue // its own sandbox's changes are other tests' business
			}
			path := param.ReplaceAllStringFunc(pattern, func(p string) string {
				switch name := strings.Trim(p, "{.}"); {
				case name == "ref" && strings.HasPrefix(pattern, "/v1/images/"):
					return "host"
				case name == "ref", name == "sandbox":
					return to.ref
				case name == "id" && strings.HasPrefix(pattern, "/v1/snapshots/"):
					return to.snapshot
				case name == "id" && strings.HasPrefix(pattern, "/v1/operations/"):
					return to.operation
				case name == "name" && strings.HasPrefix(pattern, "/v1/secrets/"):
					return sec.Name
				case name == "port":
					return "8080"
				default:
					return "x"
				}
			})
			path += "?sandbox=" + to.query
			body := ""
			if method == "POST" || method == "PUT" {
				body = `{"name":"` + b.Name + `"}`
			}
			r := httptest.NewRequest(method, path, strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+token)
			r.Header.Set("Idempotency-Key", "the-owners-key")
			if body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			w := httptest.NewRecorder()
			n.Server.ServeFromSandbox(w, r, a.ID)
			got := w.Body.String()
			for what, s := range hidden {
				if strings.Contains(got, s) && !strings.Contains(path+body, s) {
					t.Errorf("%s %s (%s, aimed at %s): the answer names %s (%s): %d %.300s", method, path, class, aim, what, s, w.Code, got)
				}
			}
			named := class == "own sandbox" || class == "own snapshot" || class == "own operation" || class == "named sandbox"
			if aim != "A" && (named || class == "outside") && w.Code < 400 {
				t.Errorf("%s %s (%s, aimed at %s): HTTP %d, want it refused", method, path, class, aim, w.Code)
			}
			if aim == "A" && class != "outside" && w.Code == 403 {
				t.Errorf("%s %s (%s, aimed at A itself): refused: %.300s", method, path, class, got)
			}
			if class == "outside" && w.Code != 403 {
				t.Errorf("%s %s (outside): HTTP %d %.300s, want 403", method, path, w.Code, got)
			}
		}
	}

	// What was aimed at B left it as it was.
	if got, err := n.Client.Get(ctx, b.ID); err != nil || got.State != "running" || got.Name != b.Name {
		t.Errorf("B after the calls: %+v, %v", got, err)
	}
	if _, err := n.Client.GetSnapshot(ctx, bSnap.Snapshot.ID); err != nil {
		t.Errorf("B's snapshot after the calls: %v", err)
	}
	if got, err := n.Client.Secret(ctx, sec.Name); err != nil || got.RevokedAt != nil || len(got.Bindings) != 1 {
		t.Errorf("the secret after the calls: %+v, %v", got, err)
	}
	// The status counts only what A reaches: itself and the sandboxes it created.
	r := httptest.NewRequest("GET", "/v1/status", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	n.Server.ServeFromSandbox(w, r, a.ID)
	var st api.Status
	json.Unmarshal(w.Body.Bytes(), &st)
	list, _ := n.Client.List(ctx, client.ListOptions{States: []string{"running"}})
	created := 0
	for _, sb := range list {
		if sb.Name != a.Name && sb.Name != b.Name {
			created++ // made by the calls above, from inside A
		}
	}
	if st.Sandboxes != 1+created {
		t.Errorf("/v1/status from inside A counts %d sandboxes; want %d (A and the %d it created), not its owner's others", st.Sandboxes, 1+created, created)
	}
}
