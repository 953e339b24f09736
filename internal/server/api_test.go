package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

var bg = context.Background()

// wantCode checks that err is an API error with code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Errorf("%s: %v; want an API error %q", what, err, code)
	}
}

// TestAPIOnTheFakeRuntime drives the real HTTP server, manager and SQLite store through
// the SDK on the fake runtime: every handler's path from request to answer, without root.
func TestAPIOnTheFakeRuntime(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	c := n.Client
	resp, err := c.Create(bg, api.CreateSandboxRequest{Name: "box", Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := resp.Sandbox
	if sb == nil || sb.State != api.StateRunning || resp.Operation.State != "succeeded" {
		t.Fatalf("create = %+v; want a running sandbox and a succeeded operation", resp)
	}
	_, err = c.Create(bg, api.CreateSandboxRequest{Name: "box"})
	wantCode(t, "second create of box", err, "already_exists")
	_, err = c.Get(bg, "nope")
	wantCode(t, "get nope", err, "not_found")

	t.Run("exec", func(t *testing.T) {
		res, err := c.Exec(bg, "box", api.ExecRequest{Shell: "echo $GREETING; echo err >&2; exit 3"})
		if err != nil || res.ExitCode != 3 || res.Stdout != "hi\n" || res.Stderr != "err\n" {
			t.Fatalf("exec = %+v, %v", res, err)
		}
		var out bytes.Buffer
		res, err = c.ExecStream(bg, "box", api.ExecRequest{Argv: []string{"echo", "streamed"}}, &out, io.Discard)
		if err != nil || res.ExitCode != 0 || out.String() != "streamed\n" {
			t.Fatalf("streamed exec = %+v, %v, %q", res, err, out.String())
		}
	})

	t.Run("files", func(t *testing.T) {
		if err := c.Mkdir(bg, "box", "/work/sub", true); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Upload(bg, "box", "/work/sub/a.txt", 0o640, strings.NewReader("alpha")); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if _, err := c.Download(bg, "box", "/work/sub/a.txt", &got); err != nil || got.String() != "alpha" {
			t.Fatalf("download = %q, %v", got.String(), err)
		}
		list, err := c.ListFiles(bg, "box", "/work/sub")
		if err != nil || len(list) != 1 || list[0].Name != "a.txt" || list[0].Size != 5 {
			t.Fatalf("list = %+v, %v", list, err)
		}
		if err := c.Remove(bg, "box", "/work", true); err != nil {
			t.Fatal(err)
		}
		_, err = c.Stat(bg, "box", "/work/sub/a.txt")
		wantCode(t, "stat of a removed file", err, "not_found")
	})

	t.Run("sessions", func(t *testing.T) {
		s, err := c.StartSession(bg, "box", api.SessionRequest{Kind: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Send(bg, "box", s.ID, "X=41"); err != nil {
			t.Fatal(err)
		}
		res, err := c.Send(bg, "box", s.ID, "echo $((X+1))")
		if err != nil || strings.TrimSpace(res.Stdout) != "42" {
			t.Fatalf("send = %+v, %v; want the session's state kept", res, err)
		}
		if err := c.CloseSession(bg, "box", s.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("lifecycle, snapshot and fork", func(t *testing.T) {
		if _, err := c.Upload(bg, "box", "/kept", 0o644, strings.NewReader("kept")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Suspend(bg, "box"); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Get(bg, "box"); got.State != api.StateSuspended {
			t.Fatalf("after suspend: %s", got.State)
		}
		snap, err := c.Snapshot(bg, "box", nil)
		if err != nil || snap.Snapshot == nil {
			t.Fatalf("snapshot = %+v, %v", snap, err)
		}
		fork, err := c.Fork(bg, snap.Snapshot.ID, api.ForkRequest{Name: "twin"})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if _, err := c.Download(bg, fork.Sandbox.Name, "/kept", &got); err != nil || got.String() != "kept" {
			t.Fatalf("the fork's /kept = %q, %v", got.String(), err)
		}
		// A call to the suspended sandbox resumes it.
		res, err := c.Exec(bg, "box", api.ExecRequest{Argv: []string{"cat", "kept"}})
		if err != nil || res.Stdout != "kept" {
			t.Fatalf("exec after suspend = %+v, %v", res, err)
		}
	})

	t.Run("a dead container found by a session call is recorded", func(t *testing.T) {
		s, err := c.StartSession(bg, "box", api.SessionRequest{Kind: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.Get(bg, "box")
		n.Driver.Stop(bg, got.ID) // the container ends behind the daemon's back
		_, err = c.Send(bg, "box", s.ID, "true")
		wantCode(t, "send to a dead container", err, "unavailable")
		if got, _ := c.Get(bg, "box"); got.State != api.StateSuspended {
			t.Errorf("after its container died: %s; want suspended", got.State)
		}
		evs, _ := c.Events(bg, "box", 0)
		if !slices.ContainsFunc(evs, func(e api.Event) bool { return e.Type == "container_gone" }) {
			t.Errorf("no container_gone event among %d", len(evs))
		}
	})

	t.Run("exposed port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // a fake sandbox's loopback is the host's
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "served "+r.URL.Path)
		}))
		port := ln.Addr().(*net.TCPAddr).Port
		p, err := c.ExposePort(bg, "box", port, false)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(p.URL)
		get := func(token string) (int, string) {
			req, _ := http.NewRequest("GET", "http://airlock"+u.Path+"hello", nil)
			if token != "" {
				req.Header.Set("X-Airlock-Port-Token", token)
			}
			resp, err := c.HTTPClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get(p.Token); code != 200 || body != "served /hello" {
			t.Errorf("through the port: %d %q; want the server's answer", code, body)
		}
		if code, _ := get("wrong"); code != 401 {
			t.Errorf("with a wrong token: %d; want 401", code)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		hc := c.HTTPClient()
		for _, tc := range []struct {
			method, path, body string
			status             int
			code               string
		}{
			{"POST", "/v1/sandboxes", `{"name":"x","bogus":1}`, 400, "invalid_argument"},
			{"POST", "/v1/sandboxes", ``, 400, "invalid_argument"},
			{"GET", "/v1/nothing", ``, 404, "not_found"},
			{"DELETE", "/v1/sandboxes/box", ``, 200, ""},
		} {
			req, _ := http.NewRequest(tc.method, "http://airlock"+tc.path, strings.NewReader(tc.body))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.code) {
				t.Errorf("%s %s: %d %s; want %d %s", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.code)
			}
		}
	})
}
