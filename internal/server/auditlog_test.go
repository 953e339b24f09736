package server_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	// It waits for the daemon's writer, as the daemon's own connections do.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(n.Dir, "airlock.db")+"?_pragma=busy_timeout(10000)")
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
// started: a session and a terminal too, with their command and directory, when they
// start and again when they end, saying how and after how long.
func TestSessionsAndTerminalsAreAudited(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartSession(bg, "box", api.SessionRequest{Kind: "raw", Argv: []string{"sh", "-c", "exit 3"}, Cwd: "/tmp", Background: true}); err != nil {
		t.Fatal(err)
	}
	closed, err := c.StartSession(bg, "box", api.SessionRequest{Kind: "raw", Argv: []string{"sleep", "60"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseSession(bg, "box", closed.ID); err != nil {
		t.Fatal(err)
	}
	pty, err := c.PTY(bg, "box", 24, 80, []string{"/bin/sh", "-c", "exit 5"})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, pty)
	if res, err := pty.Wait(); err != nil || res.ExitCode != 5 {
		t.Fatalf("the terminal ended %+v, %v; want exit code 5", res, err)
	}
	pty.Close()
	left, err := c.PTY(bg, "box", 24, 80, []string{"sleep", "60"})
	if err != nil {
		t.Fatal(err)
	}
	left.Close()

	// The ends are recorded as the node sees them, after the calls return.
	want := map[string]string{"sh -c exit 3": "exited 3", "sleep 60/session": "closed", "/bin/sh -c exit 5": "failed 5", "sleep 60/terminal": "closed"}
	var got map[string][]auditEntry
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = map[string][]auditEntry{}
		for _, e := range auditEntries(t, c, client.AuditFilter{Action: "exec"}) {
			key := strings.Join(anyStrings(e.Detail["argv"]), " ")
			if key == "sleep 60" {
				key += "/" + e.Detail["via"].(string)
			}
			got[key] = append(got[key], e)
		}
		if ends(got) == len(want) || time.Now().After(deadline) {
			break
		}
	}
	for key, end := range want {
		recs := got[key]
		if len(recs) != 2 || recs[0].Result != "started" {
			t.Errorf("%s: records %+v; want its start, then its end", key, recs)
			continue
		}
		e := recs[1]
		how := e.Result
		if code, ok := e.Detail["exit_code"].(float64); ok {
			how += fmt.Sprintf(" %d", int(code))
		}
		if _, ok := e.Detail["duration_ms"].(float64); how != end || !ok {
			t.Errorf("%s: its end recorded as %q (detail %v); want %q with its duration", key, how, e.Detail, end)
		}
	}
	if e := got["sh -c exit 3"]; len(e) > 0 && (e[0].Detail["cwd"] != "/tmp" || e[0].Detail["via"] != "session") {
		t.Errorf("the session's start record: %+v", e[0])
	}
}

// ends counts the processes whose end is recorded.
func ends(got map[string][]auditEntry) int {
	n := 0
	for _, recs := range got {
		if len(recs) > 1 {
			n++
		}
	}
	return n
}

// A read is answered before its audit record is written: a list does not wait on the
// database's writer, which a create may be holding.
func TestReadAnsweredBeforeItsAuditRecord(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	if _, err := n.Client.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	// It waits for the daemon's writer, as the daemon's own connections do.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(n.Dir, "airlock.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil { // holds the writer
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	list, err := n.Client.List(ctx, client.ListOptions{})
	cancel()
	conn.ExecContext(bg, "ROLLBACK")
	if err != nil || len(list) != 1 {
		t.Fatalf("a list while its audit record waits for the writer: %v, %d sandboxes", err, len(list))
	}
	// Its record is written once the writer is free.
	deadline := time.Now().Add(15 * time.Second)
	for !slices.ContainsFunc(auditEntries(t, n.Client, client.AuditFilter{}), func(e auditEntry) bool { return e.Action == "GET /v1/sandboxes" }) {
		if time.Now().After(deadline) {
			t.Fatal("the list's audit record was never written")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
