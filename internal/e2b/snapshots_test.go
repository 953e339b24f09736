package e2b_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// forkAnswer is one entry of a fork's answer.
type forkAnswer struct {
	Sandbox *struct {
		SandboxID, EnvdAccessToken, TrafficAccessToken string
	}
	Error *struct {
		Code    int
		Message string
	}
}

// sandboxDetail is what GET /sandboxes/{id} answers, in part.
type sandboxDetail struct {
	State    string
	Metadata map[string]string
	EndAt    time.Time
}

func (f fixture) detail(key, id string) sandboxDetail {
	f.t.Helper()
	st, body, _ := f.do("GET", "/sandboxes/"+id, key, "")
	f.want("get "+id, st, body, 200)
	var d sandboxDetail
	if err := json.Unmarshal(body, &d); err != nil {
		f.t.Fatalf("get %s: %v in %s", id, err, body)
	}
	return d
}

// create makes a sandbox with body and returns its id.
func (f fixture) create(key, body string) string {
	f.t.Helper()
	st, b, _ := f.do("POST", "/sandboxes", key, body)
	f.want("create "+body, st, b, 201)
	var sb struct{ SandboxID, EnvdAccessToken string }
	if json.Unmarshal(b, &sb); !strings.HasPrefix(sb.SandboxID, "sb_") || sb.EnvdAccessToken == "" {
		f.t.Fatalf("create %s answered %s, want an id and an envd token", body, b)
	}
	return sb.SandboxID
}

// count is how many running or paused sandboxes key sees.
func (f fixture) count(key string) int {
	f.t.Helper()
	st, body, _ := f.do("GET", "/v2/sandboxes", key, "")
	f.want("list", st, body, 200)
	var list []json.RawMessage
	json.Unmarshal(body, &list)
	return len(list)
}

// userKey makes a user with role and returns an API key of theirs.
func (f fixture) userKey(name, role string) string {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.node.Auth.CreateIdentity(ctx, name, "user", []string{role}, nil); err != nil {
		f.t.Fatal(err)
	}
	key, _, err := f.node.Auth.CreateTokenFormat(ctx, name, "e2b", "e2b", 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return key
}

func TestForkE2B(t *testing.T) {
	f, alice, bob := newFixture(t)
	src := f.create(alice, `{"templateID":"base","timeout":3600,"metadata":{"team":"a"}}`)

	st, body, _ := f.do("POST", "/sandboxes/"+src+"/fork", alice, `{"count":2,"timeout":600}`)
	f.want("fork 2", st, body, 201)
	var forks []forkAnswer
	if err := json.Unmarshal(body, &forks); err != nil || len(forks) != 2 {
		t.Fatalf("fork 2 answered %s, want two entries", body)
	}
	ids := []string{src}
	for i, fk := range forks {
		if fk.Sandbox == nil || fk.Error != nil {
			t.Fatalf("fork %d: %s, want a sandbox", i, body)
		}
		if !strings.HasPrefix(fk.Sandbox.SandboxID, "sb_") || slices.Contains(ids, fk.Sandbox.SandboxID) ||
			fk.Sandbox.EnvdAccessToken == "" || fk.Sandbox.TrafficAccessToken == "" {
			t.Fatalf("fork %d: %s, want a new sandbox id and both tokens", i, body)
		}
		ids = append(ids, fk.Sandbox.SandboxID)
		d := f.detail(alice, fk.Sandbox.SandboxID)
		if d.State != "running" || d.Metadata["team"] != "a" {
			t.Errorf("fork %d is %s with metadata %v, want running with the source's (team=a)", i, d.State, d.Metadata)
		}
		if left := time.Until(d.EndAt); left > 11*time.Minute || left < 9*time.Minute {
			t.Errorf("fork %d ends in %v, want the 600 s asked for", i, left)
		}
	}
	if d := f.detail(alice, src); d.State != "running" {
		t.Errorf("the source is %s after the fork, want running", d.State)
	}

	// Without a body: one fork, which lives as long as its source was given to.
	st, body, _ = f.do("POST", "/sandboxes/"+src+"/fork", alice, "")
	f.want("fork without a body", st, body, 201)
	if json.Unmarshal(body, &forks); len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork without a body answered %s, want one sandbox", body)
	}
	if left := time.Until(f.detail(alice, forks[0].Sandbox.SandboxID).EndAt); left < 50*time.Minute {
		t.Errorf("a fork without a timeout ends in %v, want the source's hour", left)
	}

	before := f.count(alice)
	for _, c := range []struct {
		what, key, body string
		want            int
	}{
		{"count 0", alice, `{"count":0}`, 400},
		{"count 11", alice, `{"count":11}`, 400},
		{"negative timeout", alice, `{"timeout":-1}`, 400},
		{"timeout under the minimum", alice, `{"count":2,"timeout":5}`, 400},
		{"not json", alice, `{`, 400},
		{"another's sandbox", bob, `{}`, 404},
	} {
		st, body, _ := f.do("POST", "/sandboxes/"+src+"/fork", c.key, c.body)
		f.want(c.what, st, body, c.want)
	}
	st, body, _ = f.do("POST", "/sandboxes/sb_nosuch/fork", alice, `{}`)
	f.want("unknown sandbox", st, body, 404)
	if after := f.count(alice); after != before {
		t.Errorf("refused forks left sandboxes: %d before, %d after", before, after)
	}
	if n := f.count(bob); n != 0 {
		t.Errorf("bob sees %d sandboxes after trying to fork alice's", n)
	}
	viewer := f.userKey("vera", "viewer")
	st, body, _ = f.do("POST", "/sandboxes/"+src+"/fork", viewer, `{}`)
	f.want("fork without sandbox.create", st, body, 403)
}

// snapInfo is E2B's SnapshotInfo.
type snapInfo struct {
	SnapshotID string
	Names      []string
}

func (f fixture) snapshot(key, id, body string) snapInfo {
	f.t.Helper()
	st, b, _ := f.do("POST", "/sandboxes/"+id+"/snapshots", key, body)
	f.want("snapshot "+id+" "+body, st, b, 201)
	var s snapInfo
	if json.Unmarshal(b, &s); !strings.HasPrefix(s.SnapshotID, "snap_") || s.Names == nil {
		f.t.Fatalf("snapshot %s answered %s, want a snapshot id and names", body, b)
	}
	return s
}

// snapshots lists with query and returns the ids and the next token.
func (f fixture) snapshots(key, query string) ([]string, string) {
	f.t.Helper()
	st, body, h := f.do("GET", "/snapshots"+query, key, "")
	f.want("list snapshots "+query, st, body, 200)
	var list []snapInfo
	if err := json.Unmarshal(body, &list); err != nil || list == nil {
		f.t.Fatalf("list snapshots %s: %s, want a list", query, body)
	}
	ids := []string{}
	for _, s := range list {
		ids = append(ids, s.SnapshotID)
	}
	return ids, h.Get("X-Next-Token")
}

func TestSnapshotsE2B(t *testing.T) {
	f, alice, bob := newFixture(t)
	a := f.create(alice, `{"templateID":"base","timeout":3600,"metadata":{"team":"a"},"envVars":{"FOO":"bar"}}`)
	b := f.create(alice, `{"templateID":"base"}`)

	// create: the name is kept; none is no name
	first := f.snapshot(alice, a, `{"name":"first"}`)
	if !slices.Equal(first.Names, []string{"first"}) {
		t.Errorf("names of a named snapshot: %v, want [first]", first.Names)
	}
	second := f.snapshot(alice, a, "")
	if len(second.Names) != 0 {
		t.Errorf("names of an unnamed snapshot: %v, want []", second.Names)
	}
	other := f.snapshot(alice, b, `{"name":"other"}`)
	st, body, _ := f.do("POST", "/sandboxes/"+a+"/snapshots", alice, `{"name":"two\nlines"}`)
	f.want("a name on two lines", st, body, 400)
	if !strings.Contains(string(body), "snapshot name") {
		t.Errorf("the refusal of a bad name does not speak of the snapshot name: %s", body)
	}
	st, body, _ = f.do("POST", "/sandboxes/"+a+"/snapshots", bob, `{}`)
	f.want("bob snapshots alice's", st, body, 404)
	viewer := f.userKey("vera", "viewer")
	st, body, _ = f.do("POST", "/sandboxes/"+a+"/snapshots", viewer, `{}`)
	f.want("snapshot without snapshot.create", st, body, 403)

	// list: all, by sandbox, by name or id, paged; nobody else's
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{first.SnapshotID, second.SnapshotID, other.SnapshotID}},
		{"?sandboxID=" + a, []string{first.SnapshotID, second.SnapshotID}},
		{"?sandboxID=" + b, []string{other.SnapshotID}},
		{"?sandboxID=sb_nosuch", []string{}},
		{"?name=first", []string{first.SnapshotID}},
		{"?name=" + second.SnapshotID, []string{second.SnapshotID}},
		{"?name=first&sandboxID=" + b, []string{}},
	} {
		if got, next := f.snapshots(alice, c.query); !slices.Equal(got, c.want) || next != "" {
			t.Errorf("GET /snapshots%s: %v (next %q), want %v", c.query, got, next, c.want)
		}
	}
	var paged []string
	next := ""
	for range 4 {
		q := "?limit=1"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		var page []string
		page, next = f.snapshots(alice, q)
		if len(page) != 1 {
			t.Fatalf("GET /snapshots%s: %v, want one", q, page)
		}
		paged = append(paged, page...)
		if next == "" {
			break
		}
	}
	if want := []string{first.SnapshotID, second.SnapshotID, other.SnapshotID}; !slices.Equal(paged, want) {
		t.Errorf("paged one by one: %v, want %v", paged, want)
	}
	if got, _ := f.snapshots(bob, ""); len(got) != 0 {
		t.Errorf("bob lists %v", got)
	}
	if got, _ := f.snapshots(bob, "?sandboxID="+a); len(got) != 0 {
		t.Errorf("bob lists %v of alice's sandbox", got)
	}
	if got, _ := f.snapshots(viewer, ""); len(got) != 0 {
		t.Errorf("a viewer lists %v", got)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?nextToken=zzz", "?sandbox=" + a} {
		st, body, _ := f.do("GET", "/snapshots"+q, alice, "")
		f.want("list snapshots "+q, st, body, 400)
	}

	// create from a snapshot: a fork of it, with the request's metadata and timeout
	st, body, _ = f.do("POST", "/v2/sandboxes", alice, `{"templateID":"`+first.SnapshotID+`","timeout":600,"metadata":{"from":"snap"}}`)
	f.want("create from a snapshot", st, body, 201)
	var made struct{ SandboxID, TemplateID, EnvdAccessToken, TrafficAccessToken string }
	if json.Unmarshal(body, &made); !strings.HasPrefix(made.SandboxID, "sb_") || made.EnvdAccessToken == "" || made.TrafficAccessToken == "" {
		t.Fatalf("create from a snapshot answered %s, want a sandbox with both tokens", body)
	}
	d := f.detail(alice, made.SandboxID)
	if d.State != "running" || !maps.Equal(d.Metadata, map[string]string{"from": "snap"}) {
		t.Errorf("the sandbox from the snapshot is %s with metadata %v, want running with from=snap", d.State, d.Metadata)
	}
	if left := time.Until(d.EndAt); left > 11*time.Minute || left < 9*time.Minute {
		t.Errorf("the sandbox from the snapshot ends in %v, want the 600 s asked for", left)
	}
	before := f.count(alice)
	for _, c := range []struct {
		what, key, body string
		want            int
	}{
		{"envVars with a snapshot", alice, `{"templateID":"` + first.SnapshotID + `","envVars":{"A":"b"}}`, 400},
		{"no internet with a snapshot", alice, `{"templateID":"` + first.SnapshotID + `","allow_internet_access":false}`, 400},
		{"a timeout under the minimum", alice, `{"templateID":"` + first.SnapshotID + `","timeout":5}`, 400},
		{"bad metadata", alice, `{"templateID":"` + first.SnapshotID + `","metadata":{"bad key!":"x"}}`, 400},
		{"an unknown snapshot", alice, `{"templateID":"snap_nosuch"}`, 400},
		{"another's snapshot", bob, `{"templateID":"` + first.SnapshotID + `"}`, 400},
	} {
		st, body, _ := f.do("POST", "/sandboxes", c.key, c.body)
		f.want(c.what, st, body, c.want)
		if c.what == "envVars with a snapshot" && !strings.Contains(string(body), "keeps the environment") {
			t.Errorf("%s: %s does not say that a snapshot keeps its environment", c.what, body)
		}
	}
	if after := f.count(alice); after != before {
		t.Errorf("refused creates left sandboxes: %d before, %d after", before, after)
	}

	// delete: not another's, not while a sandbox comes from it, then gone
	st, body, _ = f.do("DELETE", "/templates/"+first.SnapshotID, bob, "")
	f.want("bob deletes alice's snapshot", st, body, 404)
	agent := f.userKey("ada", "agent") // may snapshot, may not delete
	st, body, _ = f.do("DELETE", "/templates/"+first.SnapshotID, agent, "")
	f.want("delete without snapshot.delete", st, body, 403)
	st, body, _ = f.do("DELETE", "/templates/"+first.SnapshotID, alice, "")
	f.want("delete a snapshot a sandbox comes from", st, body, 409)
	st, body, _ = f.do("DELETE", "/sandboxes/"+made.SandboxID, alice, "")
	f.want("kill the sandbox from the snapshot", st, body, 204)
	st, body, _ = f.do("DELETE", "/templates/"+first.SnapshotID, alice, "")
	f.want("delete the snapshot", st, body, 204)
	st, body, _ = f.do("DELETE", "/templates/"+first.SnapshotID, alice, "")
	f.want("delete it again", st, body, 404)
	st, body, _ = f.do("DELETE", "/templates/"+second.SnapshotID, alice, "")
	f.want("delete a snapshot nothing comes from", st, body, 204)
	if got, _ := f.snapshots(alice, ""); !slices.Equal(got, []string{other.SnapshotID}) {
		t.Errorf("after the deletes alice lists %v, want %v", got, []string{other.SnapshotID})
	}
	st, body, _ = f.do("POST", "/sandboxes", alice, `{"templateID":"`+first.SnapshotID+`"}`)
	f.want("create from a deleted snapshot", st, body, 400)
}
