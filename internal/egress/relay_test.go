package egress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, then closes its side.
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// redirected hands the proxy a connection from source address from, as the node's
// transparent TCP listener would for a connection headed to dst, and returns the
// client's end.
func (e *testEnv) redirected(t *testing.T, from string, dst netip.AddrPort) net.Conn {
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
	e.proxy.ServeTCP(server, dst)
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
			Rules: mustRules(t, "127.0.0.0/8:1"), AllowPrivate: loopback8}, "no address or prefix rule"},
		{"rule with methods", "127.0.0.1", Policy{Mode: ModeAllowlist,
			Rules: mustRules(t, "127.0.0.0/8:"+port+"/GET"), AllowPrivate: loopback8}, "no address or prefix rule"},
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
