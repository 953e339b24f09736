package network

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
)

// TestConnLimit: a sandbox gets at most max connections at once, the one over is reset
// and audited, closing one frees a slot, and other sources are not counted.
func TestConnLimit(t *testing.T) {
	var mu sync.Mutex
	var recs []egress.Record
	lim := &connLimit{max: 3, open: map[string]int{},
		lookup: func(a netip.Addr) (string, bool) { return "sb1", a == netip.MustParseAddr("127.0.0.1") },
		audit:  func(r egress.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }}
	inner, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &limitedListener{Listener: inner, lim: lim, port: 8080}
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp4", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range 3 {
		dial("127.0.0.1")
		held = append(held, <-accepted)
	}
	if n := lim.openConns("sb1"); n != 3 {
		t.Fatalf("open = %d, want 3", n)
	}
	// The connection over the cap is reset: at once (then connect itself may see it)
	// or on the first read.
	over, err := net.DialTimeout("tcp4", inner.Addr().String(), 5*time.Second)
	if err == nil {
		defer over.Close()
		over.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = over.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the connection over the cap: %v, want it reset", err)
	}
	mu.Lock()
	if len(recs) != 1 || recs[0].Sandbox != "sb1" || recs[0].Allowed || recs[0].Port != 8080 ||
		!strings.Contains(recs[0].Reason, "3 connections open") {
		t.Errorf("audit %+v, want one refusal of sb1 naming the cap", recs)
	}
	mu.Unlock()

	// Another source is not counted against sb1 (the proxy refuses unknown ones itself).
	dial("127.0.0.2")
	other := <-accepted
	if _, counted := other.(*limitedConn); counted {
		t.Errorf("a connection from an unknown source was counted")
	}
	other.Close()

	// Closing one (twice: the second is a no-op) frees exactly one slot.
	held[0].Close()
	held[0].Close()
	if n := lim.openConns("sb1"); n != 2 {
		t.Fatalf("after a close open = %d, want 2", n)
	}
	c := dial("127.0.0.1")
	admitted := <-accepted
	admitted.Write([]byte("ok"))
	admitted.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
		t.Fatalf("a connection after a slot was freed: %q, %v", b, err)
	}
	for _, h := range held[1:] {
		h.Close()
	}
	if n := lim.openConns("sb1"); n != 0 {
		t.Errorf("after closing everything open = %d, want 0", n)
	}
}
