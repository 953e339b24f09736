package e2b_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

type fixture struct {
	t    *testing.T
	url  string
	node *testenv.FakeNode
}

// do sends one request with key and returns the status, the body and the headers.
func (f fixture) do(method, path, key, body string) (int, []byte, http.Header) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, f.url+path, rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// want checks the status, and for an error E2B's shape with the same code.
func (f fixture) want(what string, got int, body []byte, want int) {
	f.t.Helper()
	if got != want {
		f.t.Fatalf("%s: status %d, want %d; body %s", what, got, want, body)
	}
	if want >= 400 {
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Code != want || e.Message == "" {
			f.t.Fatalf("%s: body %s is not E2B's error shape with code %d", what, body, want)
		}
	}
}

func newFixture(t *testing.T) (fixture, string, string) { return newFixtureConfig(t, nil) }

// newFixtureConfig is newFixture on a node whose configuration config adjusts.
func newFixtureConfig(t *testing.T, config func(*manager.Config)) (fixture, string, string) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}, Config: config, E2B: true})
	ctx := context.Background()
	alice, _, err := n.Auth.CreateTokenFormat(ctx, "alice", "e2b", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(alice) {
		t.Fatalf("e2b token %q is not e2b_ and 40 hex digits", alice)
	}
	bob, _, err := n.Auth.CreateTokenFormat(ctx, "bob", "e2b", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{t: t, url: n.E2BURL, node: n}, alice, bob
}

// TestControlPlaneIsAudited: calls through the E2B plane are in the audit log, with the
// identity the key stands for, as calls to Airlock's own API are.
func TestControlPlaneIsAudited(t *testing.T) {
	f, alice, _ := newFixture(t)
	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base"}`)
	f.want("create", st, body, 201)
	var made struct{ SandboxID string }
	json.Unmarshal(body, &made)
	st, body, _ = f.do("GET", "/sandboxes", "", "")
	f.want("no key", st, body, 401)
	recs, err := f.node.AuditLog.List(context.Background(), store.AuditFilter{Action: "E2B POST /sandboxes"})
	if err != nil || len(recs) != 1 || recs[0].Identity != "alice" || !strings.Contains(string(recs[0].Doc), `"result":"201"`) {
		t.Fatalf("audit records of the create: %v %+v", err, recs)
	}
	if recs[0].Sandbox == "" || recs[0].Sandbox != made.SandboxID {
		t.Errorf("the create's record is about sandbox %q, want %q", recs[0].Sandbox, made.SandboxID)
	}
	recs, _ = f.node.AuditLog.List(context.Background(), store.AuditFilter{Action: "E2B GET /sandboxes"})
	if len(recs) != 1 || !strings.Contains(string(recs[0].Doc), "401") {
		t.Errorf("the refused call is not audited as refused: %+v", recs)
	}
}

func TestControlPlaneLifecycle(t *testing.T) {
	f, alice, bob := newFixture(t)

	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base","timeout":3600,"metadata":{"team":"a","n":"1"},"envVars":{"FOO":"bar"}}`)
	f.want("create", st, body, 201)
	var sb struct{ SandboxID, TemplateID, ClientID, EnvdVersion string }
	json.Unmarshal(body, &sb)
	if !strings.HasPrefix(sb.SandboxID, "sb_") || sb.TemplateID != "base" || sb.ClientID != e2b.ClientID || sb.EnvdVersion == "" {
		t.Fatalf("create answered %s", body)
	}
	id := sb.SandboxID
	for i := 2; i <= 3; i++ {
		st, body, _ = f.do("POST", "/sandboxes", alice, `{"templateID":"base","metadata":{"team":"a","n":"`+string(rune('0'+i))+`"}}`)
		f.want("create more", st, body, 201)
	}
	st, body, _ = f.do("POST", "/sandboxes", alice, `{"metadata":{"team":"b"}}`)
	f.want("create team b", st, body, 201)

	// list: metadata filter and pagination
	q := "/v2/sandboxes?metadata=" + url.QueryEscape("team=a") + "&limit=2&order=asc"
	st, body, h := f.do("GET", q, alice, "")
	f.want("list page 1", st, body, 200)
	var page []struct {
		SandboxID, State string
		Metadata         map[string]string
	}
	json.Unmarshal(body, &page)
	if len(page) != 2 || page[0].SandboxID != id || page[0].State != "running" || page[0].Metadata["n"] != "1" || h.Get("X-Next-Token") == "" {
		t.Fatalf("page 1: %s (next %q)", body, h.Get("X-Next-Token"))
	}
	st, body, h = f.do("GET", q+"&nextToken="+h.Get("X-Next-Token"), alice, "")
	f.want("list page 2", st, body, 200)
	json.Unmarshal(body, &page)
	if len(page) != 1 || page[0].Metadata["team"] != "a" || h.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %s (next %q)", body, h.Get("X-Next-Token"))
	}
	st, body, _ = f.do("GET", "/sandboxes", bob, "")
	f.want("bob's list", st, body, 200)
	if strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("bob sees %s", body)
	}

	// get
	st, body, _ = f.do("GET", "/sandboxes/"+id, alice, "")
	f.want("get", st, body, 200)
	if !strings.Contains(string(body), `"state":"running"`) || !strings.Contains(string(body), `"endAt"`) {
		t.Fatalf("get: %s", body)
	}

	// timeout: a running sandbox's lifetime is shortened and extended, its agent told
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/timeout", alice, `{"timeout":600}`)
	f.want("shorten", st, body, 204)
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/timeout", alice, `{"timeout":7200}`)
	f.want("extend running", st, body, 204)
	var got struct{ EndAt time.Time }
	_, body, _ = f.do("GET", "/sandboxes/"+id, alice, "")
	if json.Unmarshal(body, &got); time.Until(got.EndAt) < 7000*time.Second {
		t.Fatalf("after the extension the sandbox ends at %v, want about 2 h from now (%s)", got.EndAt, body)
	}

	// pause, pause again, connect (resumes), connect again (already running), resume while running
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/pause", alice, "")
	f.want("pause", st, body, 204)
	st, body, _ = f.do("GET", "/v2/sandboxes?state=paused", alice, "")
	f.want("list paused", st, body, 200)
	if !strings.Contains(string(body), id) {
		t.Fatalf("paused list lacks %s: %s", id, body)
	}
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/pause", alice, "")
	f.want("pause again", st, body, 409)
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/connect", alice, `{"timeout":7200}`)
	f.want("connect paused", st, body, 201)
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/connect", alice, `{"timeout":60}`)
	f.want("connect running", st, body, 200)
	var afterConnect struct{ EndAt time.Time }
	_, body, _ = f.do("GET", "/sandboxes/"+id, alice, "")
	if json.Unmarshal(body, &afterConnect); time.Until(afterConnect.EndAt) < 7000*time.Second {
		t.Fatalf("a connect with a shorter timeout left the sandbox ending at %v, want its 2 h kept (%s)", afterConnect.EndAt, body)
	}
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/connect", alice, ``)
	f.want("connect (version 1) without a timeout", st, body, 400)
	// Version 2's timeout is optional (300 s) and does not shorten a running sandbox's.
	st, body, _ = f.do("POST", "/v2/sandboxes/"+id+"/connect", alice, `{"timeout":3600}`)
	f.want("connect v2 running", st, body, 200)
	st, body, _ = f.do("POST", "/v2/sandboxes/"+id+"/connect", alice, `{}`)
	f.want("connect v2 running, no timeout", st, body, 200)
	st, body, _ = f.do("GET", "/sandboxes/"+id, alice, "")
	f.want("get after connect", st, body, 200)
	var detail struct{ EndAt time.Time }
	json.Unmarshal(body, &detail)
	if left := time.Until(detail.EndAt); left < 50*time.Minute {
		t.Errorf("a connect without a timeout left %v of the hour, want it untouched", left)
	}
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/resume", alice, `{"timeout":60}`)
	f.want("resume running", st, body, 409)
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/pause", alice, "")
	f.want("pause 2", st, body, 204)
	st, body, _ = f.do("POST", "/sandboxes/"+id+"/resume", alice, "")
	f.want("resume", st, body, 201)

	// another identity's sandbox is not found
	st, body, _ = f.do("GET", "/sandboxes/"+id, bob, "")
	f.want("bob gets alice's", st, body, 404)
	st, body, _ = f.do("DELETE", "/sandboxes/"+id, bob, "")
	f.want("bob kills alice's", st, body, 404)

	// kill
	st, body, _ = f.do("DELETE", "/sandboxes/"+id, alice, "")
	f.want("kill", st, body, 204)
	st, body, _ = f.do("GET", "/sandboxes/"+id, alice, "")
	f.want("get killed", st, body, 404)
}

// TestControlPlaneTemplateFromRegistry: a template that names a registry reference and
// is not here yet is pulled by the create, as a native create pulls it.
func TestControlPlaneTemplateFromRegistry(t *testing.T) {
	reg := testenv.NewRegistry(t)
	ref, digest := reg.PushRandom(t, "team/tmpl")
	f, alice, _ := newFixtureConfig(t, func(c *manager.Config) { c.InsecureRegistries = []string{reg.Host} })

	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"`+ref+`"}`)
	f.want("create from a registry template not pulled yet", st, body, 201)
	var sb struct {
		TemplateID string `json:"templateID"`
		SandboxID  string `json:"sandboxID"`
	}
	if err := json.Unmarshal(body, &sb); err != nil || sb.TemplateID != ref {
		t.Fatalf("created %s, want templateID %s", body, ref)
	}
	got, err := f.node.Client.Get(context.Background(), sb.SandboxID)
	if err != nil || got.ImageDigest != digest {
		t.Errorf("sandbox %+v, %v; want it on %s", got, err, digest)
	}
}

func TestControlPlaneRefusesBadInput(t *testing.T) {
	f, alice, _ := newFixture(t)
	for _, c := range []struct {
		what, method, path, key, body string
		want                          int
	}{
		{"no key", "GET", "/sandboxes", "", "", 401},
		{"wrong key", "GET", "/sandboxes", "e2b_" + strings.Repeat("0", 40), "", 401},
		{"unknown template", "POST", "/sandboxes", alice, `{"templateID":"nosuch"}`, 400},
		{"negative timeout", "POST", "/sandboxes", alice, `{"templateID":"base","timeout":-5}`, 400},
		{"timeout under the minimum", "POST", "/sandboxes", alice, `{"templateID":"base","timeout":5}`, 400},
		{"bad metadata", "POST", "/sandboxes", alice, `{"templateID":"base","metadata":{"bad key!":"x"}}`, 400},
		{"bad env", "POST", "/sandboxes", alice, `{"templateID":"base","envVars":{"1X":"x"}}`, 400},
		{"autoPause with a timeout under the shortest idle window", "POST", "/sandboxes", alice, `{"templateID":"base","autoPause":true,"timeout":30}`, 400},
		{"too large", "POST", "/sandboxes", alice, `{"templateID":"base","metadata":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`, 413},
		{"not json", "POST", "/sandboxes", alice, `{`, 400},
		{"bad limit", "GET", "/v2/sandboxes?limit=500", alice, "", 400},
		{"bad state", "GET", "/v2/sandboxes?state=dead", alice, "", 400},
		{"bad nextToken", "GET", "/v2/sandboxes?nextToken=zzz", alice, "", 400},
		{"bad order", "GET", "/v2/sandboxes?order=sideways", alice, "", 400},
		{"bad startedAfter", "GET", "/v2/sandboxes?startedAfter=yesterday", alice, "", 400},
		{"unknown sandbox", "GET", "/sandboxes/sb_nosuch", alice, "", 404},
		{"unknown route", "GET", "/nosuch", alice, "", 404},
	} {
		st, body, _ := f.do(c.method, c.path, c.key, c.body)
		f.want(c.what, st, body, c.want)
	}
	st, body, _ := f.do("GET", "/v2/sandboxes", alice, "")
	f.want("list after refusals", st, body, 200)
	if strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("a refused create left a sandbox: %s", body)
	}
}

// TestControlPlaneNotServed: E2B's calls that Airlock does not serve answer 501 in E2B's
// error shape, saying what Airlock does instead; paths that are no E2B call stay 404.
func TestControlPlaneNotServed(t *testing.T) {
	f, alice, _ := newFixture(t)
	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base"}`)
	f.want("create", st, body, 201)
	var sb struct{ SandboxID string }
	json.Unmarshal(body, &sb)
	for _, c := range []struct {
		method, path, instead string
	}{
		{"GET", "/sandboxes/" + sb.SandboxID + "/logs", "airlock logs"},
		{"GET", "/v2/sandboxes/" + sb.SandboxID + "/logs", "airlock logs"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/refreshes", "setTimeout"},
		{"GET", "/templates", "airlock image"},
		{"GET", "/templates/base/tags", "airlock image"},
		{"DELETE", "/templates/base", "airlock image rm"},
		{"POST", "/v2/templates/t/builds/b", "airlock image"},
		{"POST", "/v3/templates", "airlock image"},
		{"POST", "/volumes", "airlock volume create"},
		{"GET", "/volumecontent/v/file", "airlock volume create"},
		{"GET", "/secrets", "airlock secret"},
		{"DELETE", "/secrets/s", "airlock secret"},
		{"GET", "/teams", "airlock user"},
		{"GET", "/teams/t/metrics", "airlock user"},
		{"GET", "/nodes", "airlock status"},
		{"POST", "/access-tokens", "airlock token create"},
		{"DELETE", "/api-keys/k", "airlock token create"},
	} {
		what := c.method + " " + c.path
		st, body, _ := f.do(c.method, c.path, alice, "")
		f.want(what, st, body, 501)
		if !strings.Contains(string(body), c.instead) {
			t.Errorf("%s: %s does not say what Airlock does instead (%q)", what, body, c.instead)
		}
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/nosuch"},
		{"GET", "/sandboxes/" + sb.SandboxID + "/snapshots"},
		{"GET", "/v2/snapshots"},
	} {
		st, body, _ := f.do(c.method, c.path, alice, "")
		f.want(c.method+" "+c.path, st, body, 404)
	}
	st, body, _ = f.do("GET", "/templates", "", "")
	f.want("a call not served, without a key", st, body, 401)
}

// TestControlPlaneListOrder: GET /v2/sandboxes lists newest first, as E2B does, and
// takes order, startedAfter, startedBefore and template; its pages follow a cursor.
func TestControlPlaneListOrder(t *testing.T) {
	f, alice, _ := newFixture(t)
	var ids []string
	var started []time.Time
	for range 3 {
		st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base"}`)
		f.want("create", st, body, 201)
		var sb struct{ SandboxID string }
		json.Unmarshal(body, &sb)
		ids = append(ids, sb.SandboxID)
		_, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID, alice, "")
		var d struct{ StartedAt time.Time }
		json.Unmarshal(body, &d)
		started = append(started, d.StartedAt)
		time.Sleep(5 * time.Millisecond)
	}
	list := func(q string) []string {
		t.Helper()
		st, body, _ := f.do("GET", "/v2/sandboxes"+q, alice, "")
		f.want("list "+q, st, body, 200)
		var l []struct{ SandboxID string }
		json.Unmarshal(body, &l)
		var out []string
		for _, sb := range l {
			out = append(out, sb.SandboxID)
		}
		return out
	}
	newest := []string{ids[2], ids[1], ids[0]}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"", newest},
		{"?order=desc", newest},
		{"?order=asc", ids},
		{"?template=base", newest},
		{"?template=python", nil},
		{"?startedAfter=" + url.QueryEscape(started[0].Format(time.RFC3339Nano)), newest[:2]},
		{"?startedBefore=" + url.QueryEscape(started[2].Format(time.RFC3339Nano)) + "&order=asc", ids[:2]},
	} {
		if got := list(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("GET /v2/sandboxes%s = %v, want %v", tc.q, got, tc.want)
		}
	}

	// Pages follow the last sandbox of the page before: one made between pages does not
	// push a sandbox already seen onto the next page.
	st, body, h := f.do("GET", "/v2/sandboxes?limit=2", alice, "")
	f.want("page 1", st, body, 200)
	if !strings.Contains(string(body), ids[2]) || !strings.Contains(string(body), ids[1]) || h.Get("X-Next-Token") == "" {
		t.Fatalf("page 1: %s (next %q)", body, h.Get("X-Next-Token"))
	}
	st, body, _ = f.do("POST", "/sandboxes", alice, `{"templateID":"base"}`)
	f.want("create between pages", st, body, 201)
	if got := list("?limit=2&nextToken=" + h.Get("X-Next-Token")); !slices.Equal(got, ids[:1]) {
		t.Errorf("page 2 = %v, want %v", got, ids[:1])
	}

	// A filter the store does not apply still fills each page and ends where it should.
	after := "&startedAfter=" + url.QueryEscape(started[0].Format(time.RFC3339Nano))
	st, body, h = f.do("GET", "/v2/sandboxes?order=asc&limit=1"+after, alice, "")
	f.want("filtered page 1", st, body, 200)
	if !strings.Contains(string(body), ids[1]) || h.Get("X-Next-Token") == "" {
		t.Fatalf("filtered page 1: %s (next %q), want %s and a next token", body, h.Get("X-Next-Token"), ids[1])
	}
	if got := list("?order=asc&limit=1" + after + "&nextToken=" + h.Get("X-Next-Token")); !slices.Equal(got, ids[2:3]) {
		t.Errorf("filtered page 2 = %v, want %v", got, ids[2:3])
	}
}

// TestControlPlaneAutoPause: a sandbox created with autoPause is paused, not ended,
// once it has gone its timeout without use, as E2B pauses it at its timeout.
func TestControlPlaneAutoPause(t *testing.T) {
	f, alice, _ := newFixture(t)
	st, body, _ := f.do("POST", "/v2/sandboxes", alice, `{"templateID":"base","autoPause":true,"timeout":120}`)
	f.want("create with autoPause", st, body, 201)
	var sb struct{ SandboxID string }
	json.Unmarshal(body, &sb)
	var d struct {
		EndAt time.Time
		State string
	}
	_, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID, alice, "")
	if json.Unmarshal(body, &d); time.Until(d.EndAt) < time.Hour {
		t.Fatalf("an autoPause sandbox ends at %v, want its timeout to pause it, not end it (%s)", d.EndAt, body)
	}
	f.node.Manager.SetClock(func() time.Time { return time.Now().Add(3 * time.Minute) })
	f.node.Manager.Sweep(context.Background())
	_, body, _ = f.do("GET", "/sandboxes/"+sb.SandboxID, alice, "")
	if json.Unmarshal(body, &d); d.State != "paused" {
		t.Fatalf("3 minutes without use past a 2-minute autoPause timeout the sandbox is %s, want paused (%s)", d.State, body)
	}
	st, body, _ = f.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", alice, `{"timeout":300}`)
	f.want("connect resumes it", st, body, 201)
}

// TestControlPlaneNetwork: network at create and updateNetwork set the sandbox's
// egress policy; what Airlock's policy cannot say is refused and changes nothing.
func TestControlPlaneNetwork(t *testing.T) {
	f, alice, _ := newFixture(t)
	policy := func(id string) manager.NetworkPolicy {
		t.Helper()
		sb, err := f.node.Manager.Resolve(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.Network
	}
	create := func(body string) string {
		t.Helper()
		st, b, _ := f.do("POST", "/v2/sandboxes", alice, body)
		f.want("create "+body, st, b, 201)
		var sb struct{ SandboxID string }
		json.Unmarshal(b, &sb)
		return sb.SandboxID
	}
	id := create(`{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["api.example.com","1.2.3.4","8.8.0.0/16"],"allowPublicTraffic":false}}`)
	if got := policy(id); got.Mode != "allowlist" || !slices.Equal(got.Allow, []string{"api.example.com", "1.2.3.4/32", "8.8.0.0/16"}) {
		t.Errorf("allowOut with denyOut all: policy %+v", got)
	}
	if got := policy(create(`{"network":{"denyOut":["0.0.0.0/0"]}}`)); got.Mode != "deny_all" {
		t.Errorf("denyOut all: policy %+v", got)
	}
	if got := policy(create(`{"allow_internet_access":false}`)); got.Mode != "deny_all" {
		t.Errorf("allow_internet_access false: policy %+v", got)
	}
	if got := policy(create(`{}`)); got.Mode != manager.DefaultNetwork.Mode {
		t.Errorf("no network: policy %+v, want the default %s", got, manager.DefaultNetwork.Mode)
	}

	for _, body := range []string{
		`{"network":{"denyOut":["10.0.0.0/8"]}}`,
		`{"network":{"allowPublicTraffic":true}}`,
		`{"network":{"maskRequestHost":"localhost:${PORT}"}}`,
		`{"network":{"allowOut":["not a host"]}}`,
	} {
		st, b, _ := f.do("POST", "/v2/sandboxes", alice, body)
		f.want("create "+body, st, b, 400)
	}

	st, b, _ := f.do("PUT", "/sandboxes/"+id+"/network", alice, `{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}`)
	f.want("updateNetwork", st, b, 204)
	if got := policy(id); got.Mode != "allowlist" || !slices.Equal(got.Allow, []string{"pypi.org"}) {
		t.Errorf("after updateNetwork: policy %+v", got)
	}
	st, b, _ = f.do("PUT", "/sandboxes/"+id+"/network", alice, `{"allow_internet_access":false}`)
	f.want("updateNetwork deny", st, b, 204)
	if got := policy(id); got.Mode != "deny_all" {
		t.Errorf("after allow_internet_access false: policy %+v", got)
	}
	st, b, _ = f.do("PUT", "/sandboxes/"+id+"/network", alice, `{"denyOut":["1.1.1.1"]}`)
	f.want("updateNetwork with a denyOut it cannot map", st, b, 400)
	st, b, _ = f.do("PUT", "/sandboxes/"+id+"/network", alice, `{}`)
	f.want("updateNetwork naming nothing", st, b, 400)
	if got := policy(id); got.Mode != "deny_all" {
		t.Errorf("a refused update changed the policy to %+v", got)
	}
	st, b, _ = f.do("PUT", "/sandboxes/"+id+"/network", alice, `{"allow_internet_access":true}`)
	f.want("updateNetwork allow", st, b, 204)
	if got := policy(id); got.Mode != manager.DefaultNetwork.Mode {
		t.Errorf("after allow_internet_access true: policy %+v, want the default %s", got, manager.DefaultNetwork.Mode)
	}
}

// TestControlPlaneVolumeMounts: a create with volumeMounts attaches the caller's
// volumes (made with Airlock's own API); another owner's is not found.
func TestControlPlaneVolumeMounts(t *testing.T) {
	testenv.RequireVolumes(t)
	f, alice, bob := newFixture(t)
	ctx := context.Background()
	if _, err := f.node.Manager.CreateVolume(ctx, "alice", "data", 16<<20, ""); err != nil {
		t.Fatal(err)
	}
	st, body, _ := f.do("POST", "/sandboxes", bob, `{"templateID":"base","volumeMounts":[{"name":"data","path":"/data"}]}`)
	f.want("another owner's volume", st, body, 404)
	st, body, _ = f.do("POST", "/sandboxes", alice, `{"templateID":"base","volumeMounts":[{"name":"data","path":"/data"}]}`)
	f.want("create with a volume", st, body, 201)
	var made struct{ SandboxID string }
	json.Unmarshal(body, &made)
	v, err := f.node.Manager.GetVolume(ctx, "alice", "data")
	if err != nil || len(v.Attachments) != 1 || v.Attachments[0].Path != "/data" {
		t.Fatalf("the volume after the create: %+v, %v; want it attached at /data", v, err)
	}
	st, body, _ = f.do("DELETE", "/sandboxes/"+made.SandboxID, alice, "")
	f.want("kill", st, body, 204)
	f.node.Manager.WaitCleanups(ctx)
	if err := f.node.Manager.DeleteVolume(ctx, "alice", "data"); err != nil {
		t.Fatal(err)
	}
}
