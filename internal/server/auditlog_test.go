package server_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

type auditEntry struct {
	Identity, Action, Resource, Sandbox, Result, Source string
	Detail                                              map[string]any
}

func auditEntries(t *testing.T, c *client.Client, f client.AuditFilter) []auditEntry {
	t.Helper()
	recs, err := c.AuditLog(bg, f)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditEntry
	for _, r := range recs {
		var e auditEntry
		if err := json.Unmarshal(r.Record, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// Every API request and every exec is in the hash-chained log with who, what, on what
// and how it ended; a non-administrator reads only its own records; the chain verifies;
// and while the log cannot be written, calls that change anything are refused.
func TestAuditLog(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"vic"}})
	ctx := context.Background()
	if _, err := n.Auth.SetRoles(ctx, "vic", []string{"viewer"}); err != nil {
		t.Fatal(err)
	}
	vic, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "vic")})
	admin := n.Client
	resp, err := admin.Create(bg, api.CreateSandboxRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(bg, "box", api.ExecRequest{Argv: []string{"echo", "hi"}, Cwd: "/tmp"}); err != nil {
		t.Fatal(err)
	}
	vic.Create(bg, api.CreateSandboxRequest{Name: "denied"}) // a viewer may not
	stranger, _ := client.New(client.Options{Addr: n.Addr, Token: "al_not-a-token-of-anyone"})
	stranger.Status(bg)

	all := auditEntries(t, admin, client.AuditFilter{})
	find := func(pred func(auditEntry) bool) *auditEntry {
		for i := range all {
			if pred(all[i]) {
				return &all[i]
			}
		}
		return nil
	}
	if e := find(func(e auditEntry) bool { return e.Action == "POST /v1/sandboxes" && e.Identity == "local" }); e == nil ||
		e.Result != "201" || !strings.HasPrefix(e.Source, "unix uid ") {
		t.Errorf("the create: %+v", e)
	}
	sum := sha256.Sum256([]byte("hi\n"))
	if e := find(func(e auditEntry) bool { return e.Action == "exec" }); e == nil || e.Sandbox != resp.Sandbox.ID ||
		e.Result != "succeeded" || e.Detail["cwd"] != "/tmp" || e.Detail["output_sha256"] != hex.EncodeToString(sum[:]) ||
		e.Detail["exit_code"] != float64(0) || !strings.Contains(strings.Join(anyStrings(e.Detail["argv"]), " "), "echo hi") {
		t.Errorf("the exec: %+v", e)
	}
	// A sandbox's records are found by its id: the create and the exec route with it.
	var routes []string
	for _, e := range auditEntries(t, admin, client.AuditFilter{Sandbox: resp.Sandbox.ID}) {
		routes = append(routes, e.Action)
	}
	for _, want := range []string{"POST /v1/sandboxes", "POST /v1/sandboxes/{ref}/exec", "exec"} {
		if !slices.Contains(routes, want) {
			t.Errorf("the records of sandbox box are %q; want %q among them", routes, want)
		}
	}
	if e := find(func(e auditEntry) bool { return e.Identity == "vic" && e.Action == "POST /v1/sandboxes" }); e == nil ||
		e.Result != "403 permission_denied" || !strings.HasPrefix(e.Source, "tcp ") {
		t.Errorf("the refused create: %+v", e)
	}
	if e := find(func(e auditEntry) bool { return e.Identity == "" && strings.Contains(e.Result, "unauthenticated") }); e == nil {
		t.Error("the unauthenticated request is not in the log")
	}
	for _, e := range auditEntries(t, vic, client.AuditFilter{}) {
		if e.Identity != "vic" {
			t.Errorf("vic reads another identity's record: %+v", e)
		}
	}
	if _, err := vic.AuditLog(bg, client.AuditFilter{Identity: "local"}); err == nil {
		t.Error("vic read local's records")
	}
	if res, err := admin.VerifyAudit(bg); err != nil || !res.OK || res.Records < 5 {
		t.Fatalf("verify: %+v, %v", res, err)
	}

	// The log's table goes away: writes fail, and mutating calls are refused.
	db, err := sql.Open("sqlite", filepath.Join(n.Dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE audit_log RENAME TO audit_log_away`); err != nil {
		t.Fatal(err)
	}
	admin.Get(bg, "box") // a read: answered, its record fails
	_, err = admin.Create(bg, api.CreateSandboxRequest{Name: "unrecorded"})
	wantCode(t, "a create while the audit log cannot be written", err, "unavailable")
	if _, err := admin.Get(bg, "box"); err != nil {
		t.Errorf("a read while the audit log cannot be written: %v", err)
	}
	if _, err := db.Exec(`ALTER TABLE audit_log_away RENAME TO audit_log`); err != nil {
		t.Fatal(err)
	}
	admin.Get(bg, "box") // the next write succeeds: the log is healthy again
	if _, err := admin.Create(bg, api.CreateSandboxRequest{Name: "recorded"}); err != nil {
		t.Errorf("a create once the log is back: %v", err)
	}
}

func anyStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// What a caller writes into an audit record (an exec's argv, a path) is clipped: one
// request cannot store a megabyte in the log.
func TestAuditRecordsAreClipped(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 200<<10)
	argv := append([]string{"true", long}, strings.Split(strings.Repeat("a ", 100), " ")...)
	if _, err := c.Exec(bg, "box", api.ExecRequest{Argv: argv}); err != nil {
		t.Fatal(err)
	}
	recs, err := c.AuditLog(bg, client.AuditFilter{Action: "exec"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("exec records: %d, %v", len(recs), err)
	}
	if len(recs[0].Record) > 32<<10 || !strings.Contains(string(recs[0].Record), "(204800 bytes)") || !strings.Contains(string(recs[0].Record), "more)") {
		t.Errorf("the exec's record is %d bytes; want the long argument and the many arguments clipped", len(recs[0].Record))
	}
}

// Every process started in a sandbox is in the audit log as an exec, whichever way it
// started: a session and a terminal too, with their command and directory.
func TestSessionsAndTerminalsAreAudited(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartSession(bg, "box", api.SessionRequest{Kind: "raw", Argv: []string{"sleep", "60"}, Cwd: "/tmp", Background: true}); err != nil {
		t.Fatal(err)
	}
	pty, err := c.PTY(bg, "box", 24, 80, []string{"/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	pty.Close()
	got := map[string]auditEntry{}
	for _, e := range auditEntries(t, c, client.AuditFilter{Action: "exec"}) {
		via, _ := e.Detail["via"].(string)
		got[via] = e
	}
	if e, ok := got["session"]; !ok || e.Result != "started" || e.Detail["cwd"] != "/tmp" ||
		strings.Join(anyStrings(e.Detail["argv"]), " ") != "sleep 60" {
		t.Errorf("the session's exec record: %+v (found %t)", e, ok)
	}
	if e, ok := got["terminal"]; !ok || e.Result != "started" || strings.Join(anyStrings(e.Detail["argv"]), " ") != "/bin/sh" {
		t.Errorf("the terminal's exec record: %+v (found %t)", e, ok)
	}
}
