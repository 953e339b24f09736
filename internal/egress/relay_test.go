package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, then closes its side. At
// cleanup it closes everything and waits for its goroutines (goleak checks them).
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				io.Copy(c, c)
			})
		}
	})
	return netip.MustParseAddrPort(l.Addr().String())
}

// redirected hands the proxy a connection from source address from, as the node's
// transparent TCP listener would for a connection headed to dst, and returns the
// client's end.
func (e *testEnv) redirected(t *testing.T, from string, dst netip.AddrPort) net.Conn {
	return e.handOver(t, from, dst, e.proxy.ServeTCP)
}

// handOver dials a listener from source address from and gives serve the server's end
// of the connection with its original destination dst; it returns the client's end.
func (e *testEnv) handOver(t *testing.T, from string, dst netip.AddrPort, serve func(net.Conn, netip.AddrPort)) net.Conn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	client, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	serve(server, dst)
	client.SetDeadline(time.Now().Add(5 * time.Second))
	return client
}

func mustRules(t *testing.T, specs ...string) []Rule {
	t.Helper()
	var out []Rule
	for _, s := range specs {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestServeTCPRelaysAllowedConnections(t *testing.T) {
	echo := echoServer(t)
	port := strconv.Itoa(int(echo.Port()))
	e := newTestEnv(t, SandboxInfo{ID: "sb1", Generation: 3, Policy: Policy{Mode: ModeAllowlist,
		Rules: mustRules(t, "127.0.0.0/8:"+port), AllowPrivate: loopback8}})

	c := e.redirected(t, "127.0.0.1", echo)
	payload := bytes.Repeat([]byte("airlock "), 64<<10) // 512 KiB: several splices
	go func() {
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite() // the half-close must reach the server
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo returned %d bytes, want the %d sent", len(got), len(payload))
	}
	rec := e.waitRecord("the relayed connection", func(r Record) bool { return r.Method == "TCP" })
	if !rec.Allowed || rec.Sandbox != "sb1" || rec.Generation != 3 || rec.Addr != "127.0.0.1" ||
		rec.Port != int(echo.Port()) || rec.Rule != "127.0.0.0/8:"+port ||
		rec.BytesUp != int64(len(payload)) || rec.BytesDown != int64(len(payload)) {
		t.Errorf("record %+v, want an allowed TCP record of sb1 gen 3 with %d bytes each way", rec, len(payload))
	}
}

// TestServeTCPByResolvedName: a rule naming a host allows plain TCP to the addresses
// the sandbox resolved that name to, and to no other.
func TestServeTCPByResolvedName(t *testing.T) {
	echo := echoServer(t)
	port := strconv.Itoa(int(echo.Port()))
	e := newTestEnv(t, SandboxInfo{ID: "sb1", Generation: 1, Policy: Policy{Mode: ModeAllowlist,
		Rules: mustRules(t, "db.example.com:"+port), AllowPrivate: loopback8}})

	refused := func(what string) {
		t.Helper()
		c := e.redirected(t, "127.0.0.1", echo)
		if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
			t.Fatalf("%s: the connection stayed open", what)
		}
	}
	refused("before any lookup")
	e.names.Add("sb2", "db.example.com", echo.Addr(), time.Minute) // another sandbox's lookup
	refused("after another sandbox's lookup")
	e.names.Add("sb1", "other.example.com", echo.Addr(), time.Minute) // a name no rule allows
	refused("after a lookup of another name")

	e.names.Add("sb1", "db.example.com", echo.Addr(), time.Minute)
	c := e.redirected(t, "127.0.0.1", echo)
	c.Write([]byte("ping"))
	c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "ping" {
		t.Fatalf("echo after the lookup: %q, %v", got, err)
	}
	rec := e.waitRecord("the allowed connection", func(r Record) bool { return r.Method == "TCP" && r.Allowed })
	if rec.Host != "db.example.com" || rec.Addr != "127.0.0.1" || rec.Rule != "db.example.com:"+port {
		t.Errorf("record %+v, want host db.example.com at 127.0.0.1 under its rule", rec)
	}
	e.names.Forget("sb1")
	refused("after Forget")
}

func TestServeTCPRefuses(t *testing.T) {
	echo := echoServer(t)
	port := strconv.Itoa(int(echo.Port()))
	tests := []struct {
		name   string
		from   string
		pol    Policy
		reason string
	}{
		{"no rule for the port", "127.0.0.1", Policy{Mode: ModeAllowlist,
			Rules: mustRules(t, "127.0.0.0/8:1"), AllowPrivate: loopback8}, "no rule without methods"},
		{"rule with methods", "127.0.0.1", Policy{Mode: ModeAllowlist,
			Rules: mustRules(t, "127.0.0.0/8:"+port+"/GET"), AllowPrivate: loopback8}, "no rule without methods"},
		{"protected address not authorised", "127.0.0.1", Policy{Mode: ModeAllowlist,
			Rules: mustRules(t, "127.0.0.0/8:"+port)}, "protected"},
		{"unrestricted is still no loopback", "127.0.0.1", Policy{Mode: ModeUnrestricted}, "protected"},
		{"baseline", "127.0.0.1", Policy{Mode: ModeBaseline, AllowPrivate: loopback8}, "baseline allows only HTTP"},
		{"deny_all", "127.0.0.1", Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "no outbound"},
		{"unknown source", "127.0.0.2", Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}, "unknown source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, SandboxInfo{ID: "sb1", Generation: 1, Policy: tt.pol})
			c := e.redirected(t, tt.from, echo)
			c.Write([]byte("hello"))
			buf := make([]byte, 16)
			n, err := c.Read(buf)
			if err == nil || n > 0 {
				t.Fatalf("read %q, %v from a refused connection; want it closed", buf[:n], err)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("a refused connection hung instead of closing")
			}
			rec := e.waitRecord("the refusal", func(r Record) bool { return r.Method == "TCP" })
			if rec.Allowed || !strings.Contains(rec.Reason, tt.reason) || rec.Port != int(echo.Port()) {
				t.Errorf("record %+v, want a refusal saying %q", rec, tt.reason)
			}
		})
	}
}

// TestConnectRawRelay: a CONNECT tunnel to a port other than 80 and 443 that a rule
// without methods allows carries any protocol as it is, here one whose server speaks
// first, and its record has the bytes.
func TestConnectRawRelay(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	defer func() { l.Close(); <-served }()
	go func() {
		defer close(served)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("220 hello\n")) // the server speaks first, like SMTP or MySQL
		io.Copy(c, c)
	}()
	target := l.Addr().String()
	_, port, _ := net.SplitHostPort(target)
	e := newTestEnv(t, SandboxInfo{ID: "sb1", Generation: 1, Policy: Policy{Mode: ModeAllowlist,
		Rules: mustRules(t, "127.0.0.1:"+port), AllowPrivate: loopback8}})
	// The answer is read a byte at a time: the server's greeting may follow it at once.
	c, err := net.DialTimeout("tcp", e.proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	var head []byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			t.Fatalf("CONNECT %s: %v after %q", target, err, head)
		}
		head = append(head, b[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
		t.Fatalf("CONNECT %s = %q, want 200", target, head)
	}
	greeting := make([]byte, 10)
	if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "220 hello\n" {
		t.Fatalf("greeting through the tunnel: %q, %v", greeting, err)
	}
	c.Write([]byte("EHLO sandbox\n"))
	c.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "EHLO sandbox\n" {
		t.Fatalf("echo through the tunnel: %q, %v", rest, err)
	}
	rec := e.waitRecord("the tunnel", func(r Record) bool { return r.Method == "CONNECT" })
	if !rec.Allowed || rec.BytesUp != 13 || rec.BytesDown != 23 || rec.Rule != "127.0.0.1:"+port {
		t.Errorf("record %+v, want an allowed tunnel with 13 bytes up and 23 down", rec)
	}
}

// TestServeTCPUpstreamDown: an allowed connection whose upstream does not answer is
// reset and audited as an error, with the rule that allowed it and why it failed (a
// refusal, deny, is for policy only).
func TestServeTCPUpstreamDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := netip.MustParseAddrPort(l.Addr().String())
	l.Close() // nothing listens there now
	e := newTestEnv(t, SandboxInfo{ID: "sb1", Generation: 1, Policy: Policy{Mode: ModeAllowlist,
		Rules: mustRules(t, "127.0.0.0/8"), AllowPrivate: loopback8}})
	c := e.redirected(t, "127.0.0.1", dead)
	if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("read from a relay to a dead upstream: %d, %v; want it closed", n, err)
	}
	rec := e.waitRecord("the failed connection", func(r Record) bool { return r.Method == "TCP" })
	if rec.Allowed || rec.Decision != DecisionError || !strings.Contains(rec.Reason, "cannot connect") || rec.Rule != "127.0.0.0/8" {
		t.Errorf("record %+v, want the error decision of a connection the rule allowed that could not connect", rec)
	}
}
