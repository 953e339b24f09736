package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestPortWithNothingListening: a request to an exposed port nobody listens on is
// answered unavailable with a message that says so, and is no error in the daemon's log.
func TestPortWithNothingListening(t *testing.T) {
	var logBuf testenv.LockedBuffer
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	p, err := c.ExposePort(bg, "box", port, true)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(p.URL)
	if u.Host != api.SocketHost {
		t.Errorf("URL %s without a TCP listener; want host %s, reached through the socket", p.URL, api.SocketHost)
	}
	resp, err := c.HTTPClient().Get("http://" + api.SocketHost + u.Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e api.ErrorBody
	json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, "nothing answered") {
		t.Errorf("probe of a closed port: %d %s; want 503 unavailable saying nothing answered", resp.StatusCode, body)
	}
	logs := logBuf.String()
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("the probe was logged as an error:\n%s", logs)
	}
	if !strings.Contains(logs, "exposed port did not answer") {
		t.Errorf("the probe is not in the debug log:\n%s", logs)
	}
}
