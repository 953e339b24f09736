package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// netStreamServer serves, on 127.0.0.1:PORT, /stream (a chunked body of 600 lines, one
// every 50 ms) and /headers (the request's path and headers as JSON).
const netStreamServer = `
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/headers"):
            body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(600):
            line = b"line %03d\n" % i
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestNetworkPorts exposes ports of servers inside a real sandbox through the daemon:
// tokens, public ports, closing (which cuts open connections), activity, and that
// nothing reaches a sandbox's ports any other way.
func TestNetworkPorts(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	sb := n.Create(t, api.CreateSandboxRequest{Name: "ports", Network: &api.NetworkPolicy{Mode: "baseline"}})
	content := "hello from inside " + randHex(8) + "\n"
	res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{
		Shell: "mkdir -p /srv/www && cat > /srv/www/hello.txt && printf '%s' \"$STREAM\" > /tmp/stream.py",
		Stdin: content, Env: map[string]string{"STREAM": netStreamServer}, Timeout: execTimeout})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("prepare the files: %v %+v", err, res)
	}
	for _, argv := range [][]string{
		{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"},
		{"python3", "/tmp/stream.py", "8001"},
		{"python3", "-m", "http.server", "8003", "--bind", "0.0.0.0"},
	} {
		if _, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "raw", Argv: argv, Cwd: "/srv/www"}); err != nil {
			t.Fatalf("start %v: %v", argv, err)
		}
	}
	hc := n.Client.HTTPClient()
	get := func(rawURL string, header map[string]string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(background, 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", rawURL, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	p, err := n.Client.ExposePort(background, sb.Name, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Port != 8000 || p.Public || len(p.Token) < 16 || !strings.HasSuffix(p.URL, "/v1/ports/"+sb.ID+"/8000/") {
		t.Fatalf("exposed port: got %+v, want 8000, private, a token, a URL ending in /v1/ports/%s/8000/", p, sb.ID)
	}
	tok := map[string]string{"X-Airlock-Port-Token": p.Token}
	fileURL := p.URL + "hello.txt"
	if err := retry(10*time.Second, func() error {
		if code, body := get(fileURL, tok); code != 200 {
			return errors.New(strconv.Itoa(code) + " " + body)
		}
		return nil
	}); err != nil {
		t.Fatalf("the sandbox's http.server never answered through the exposed port: %v", err)
	}

	t.Run("token", func(t *testing.T) {
		if code, body := get(fileURL, nil); code != http.StatusUnauthorized {
			t.Errorf("without the token: got %d %q, want 401", code, body)
		}
		if code, body := get(fileURL, map[string]string{"X-Airlock-Port-Token": strings.Repeat("0", len(p.Token))}); code != http.StatusUnauthorized {
			t.Errorf("with a wrong token: got %d %q, want 401", code, body)
		}
		if code, body := get(fileURL, tok); code != 200 || body != content {
			t.Errorf("with the token: got %d %q, want 200 %q", code, body, content)
		}
		if code, body := get(fileURL+"?airlock_token="+url.QueryEscape(p.Token), nil); code != 200 || body != content {
			t.Errorf("with the token as query parameter: got %d %q, want 200 %q", code, body, content)
		}
		if code, _ := get(p.URL+"missing.txt", tok); code != 404 {
			t.Errorf("a missing file: got %d, want the sandbox server's 404", code)
		}
		ports, err := n.Client.Ports(background, sb.Name)
		if err != nil || len(ports) != 1 || ports[0].Token != p.Token || ports[0].URL != p.URL {
			t.Errorf("ports: got %+v, %v, want [%+v]", ports, err, *p)
		}
		// A port that is not exposed is not reachable, token or not.
		other := strings.Replace(p.URL, "/8000/", "/8003/", 1)
		if code, _ := get(other, tok); code != http.StatusNotFound {
			t.Errorf("a port not exposed: got %d, want 404", code)
		}
	})

	t.Run("the token stays outside", func(t *testing.T) {
		sp, err := n.Client.ExposePort(background, sb.Name, 8001, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := retry(10*time.Second, func() error {
			if code, body := get(sp.URL+"headers", map[string]string{"X-Airlock-Port-Token": sp.Token}); code != 200 {
				return errors.New(strconv.Itoa(code) + " " + body)
			}
			return nil
		}); err != nil {
			t.Fatalf("the stream server never answered: %v", err)
		}
		if sp.Token == p.Token {
			t.Errorf("two ports share the token %s", sp.Token)
		}
		if code, _ := get(sp.URL+"headers", tok); code != http.StatusUnauthorized {
			t.Errorf("another port's token: got %d, want 401", code)
		}
		code, body := get(sp.URL+"headers?x=1&airlock_token="+url.QueryEscape(sp.Token),
			map[string]string{"X-Airlock-Port-Token": sp.Token, "Authorization": "Bearer secret"})
		if code != 200 {
			t.Fatalf("headers: got %d %q", code, body)
		}
		if strings.Contains(body, sp.Token) || strings.Contains(body, "secret") || strings.Contains(body, "airlock_token") {
			t.Errorf("the sandbox's server saw the token or the caller's credentials: %s", body)
		}
		var echo struct{ Path string }
		json.Unmarshal([]byte(body), &echo)
		if echo.Path != "/headers?x=1" {
			t.Errorf("path seen in the sandbox: got %q, want /headers?x=1", echo.Path)
		}
	})

	t.Run("public", func(t *testing.T) {
		pub, err := n.Client.ExposePort(background, sb.Name, 8000, true)
		if err != nil {
			t.Fatal(err)
		}
		if !pub.Public || pub.Token != "" || pub.URL != p.URL {
			t.Errorf("public port: got %+v, want public, no token, the same URL", pub)
		}
		if code, body := get(fileURL, nil); code != 200 || body != content {
			t.Errorf("public port without a token: got %d %q, want 200", code, body)
		}
		if _, err := n.Client.ExposePort(background, sb.Name, 8000, false); err != nil {
			t.Fatal(err)
		}
		if code, _ := get(fileURL, nil); code != http.StatusUnauthorized {
			t.Errorf("private again, without a token: got %d, want 401", code)
		}
	})

	t.Run("traffic counts as activity", func(t *testing.T) {
		ports, _ := n.Client.Ports(background, sb.Name)
		var token string
		for _, pp := range ports {
			if pp.Port == 8000 {
				token = pp.Token
			}
		}
		before, err := n.Client.Get(background, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		// Control: API calls about the sandbox are not its traffic.
		if mid, err := n.Client.Get(background, sb.Name); err != nil || !mid.LastActivity.Equal(before.LastActivity) {
			t.Errorf("last_activity moved from %v to %v (%v) without traffic", before.LastActivity, mid.LastActivity, err)
		}
		start := time.Now()
		if code, _ := get(fileURL, map[string]string{"X-Airlock-Port-Token": token}); code != 200 {
			t.Fatalf("GET through the port: %d", code)
		}
		after, err := n.Client.Get(background, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !after.LastActivity.After(before.LastActivity) || after.LastActivity.Before(start.Add(-time.Second)) {
			t.Errorf("last_activity: %v before, %v after a request at %v, want it moved to the request", before.LastActivity, after.LastActivity, start)
		}
	})

	t.Run("close cuts open connections", func(t *testing.T) {
		ports, _ := n.Client.Ports(background, sb.Name)
		var sp api.Port
		for _, pp := range ports {
			if pp.Port == 8001 {
				sp = pp
			}
		}
		ctx, cancel := context.WithTimeout(background, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sp.URL+"stream", nil)
		req.Header.Set("X-Airlock-Port-Token", sp.Token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i := 0; i < 3; i++ {
			line, err := br.ReadString('\n')
			if err != nil || line != "line 00"+strconv.Itoa(i)+"\n" {
				t.Fatalf("stream line %d: got %q, %v", i, line, err)
			}
		}
		closed := time.Now()
		if err := n.Client.ClosePort(background, sb.Name, 8001); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(br)
		lines := strings.Count(string(rest), "\n")
		t.Logf("after ClosePort: %d more lines in %v, then %v", lines, time.Since(closed).Round(time.Millisecond), err)
		if time.Since(closed) > 3*time.Second || lines > 60 {
			t.Errorf("the open stream went on for %v (%d lines) after ClosePort, want it cut", time.Since(closed), lines)
		}
		if err == nil {
			t.Errorf("the cut stream ended cleanly, want an error (it was not complete)")
		}
		if code, _ := get(sp.URL+"headers", map[string]string{"X-Airlock-Port-Token": sp.Token}); code != http.StatusNotFound {
			t.Errorf("a closed port: got %d, want 404", code)
		}
		if err := n.Client.ClosePort(background, sb.Name, 8000); err != nil {
			t.Fatal(err)
		}
		if code, _ := get(fileURL, tok); code != http.StatusNotFound {
			t.Errorf("a closed port: got %d, want 404", code)
		}
		wantAPIError(t, "close a port that is not exposed", n.Client.ClosePort(background, sb.Name, 8000), 404, "not_found")
		if ports, err := n.Client.Ports(background, sb.Name); err != nil || len(ports) != 0 {
			t.Errorf("ports after closing both: got %+v, %v, want none", ports, err)
		}
	})

	t.Run("nothing else reaches the sandbox", func(t *testing.T) {
		link, ok := n.Network.Link(sb.ID)
		if !ok {
			t.Fatal("no link")
		}
		// The server on 0.0.0.0:8003 inside is not reachable at the sandbox's address,
		// neither from the host nor from another sandbox.
		addr := net.JoinHostPort(link.SandboxAddr.String(), "8003")
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("the host connected to %s, a port the sandbox did not expose", addr)
		}
		peer := n.Create(t, api.CreateSandboxRequest{Name: "ports-peer", Network: &api.NetworkPolicy{Mode: "unrestricted", AllowPrivate: []string{"10.0.0.0/8"}}})
		netInstallProbe(t, n, peer.Name)
		if r := netProbe(t, n, peer.Name, "tcp", link.SandboxAddr.String(), "8003"); r.OK {
			t.Errorf("another sandbox connected to %s: %s", addr, r)
		}
	})
}
