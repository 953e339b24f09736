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
	lim := newConnLimit(3, 0, 0,
		func(a netip.Addr) (string, string, bool) { return "sb1", "o1", a == netip.MustParseAddr("127.0.0.1") },
		func(r egress.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() })
	inner, accepted := serveLimited(t, lim, 8080)
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

// TestConnLimitPerOwnerAndNode: an owner's sandboxes together, and all sandboxes of the
// node together, stop at their caps; each refusal names the cap that was reached, and a
// closed connection gives its slot back to every cap.
func TestConnLimitPerOwnerAndNode(t *testing.T) {
	sandboxes := map[string][2]string{
		"127.0.0.1": {"a1", "owner-a"}, "127.0.0.2": {"a2", "owner-a"},
		"127.0.0.3": {"b", "owner-b"}, "127.0.0.4": {"c", "owner-c"},
	}
	var mu sync.Mutex
	var reasons []string
	lim := newConnLimit(2, 3, 4, func(a netip.Addr) (string, string, bool) {
		s, ok := sandboxes[a.String()]
		return s[0], s[1], ok
	}, func(r egress.Record) { mu.Lock(); reasons = append(reasons, r.Sandbox+": "+r.Reason); mu.Unlock() })
	inner, accepted := serveLimited(t, lim, 443)
	// open connects from src and says whether the connection was admitted.
	open := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp4", inner.Addr().String())
		if err != nil {
			return nil
		}
		t.Cleanup(func() { c.Close() })
		select {
		case s := <-accepted:
			t.Cleanup(func() { s.Close() })
			return s
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}
	steps := []struct {
		src   string
		admit bool
		cap   string
	}{
		{"127.0.0.1", true, ""}, {"127.0.0.1", true, ""},
		{"127.0.0.1", false, "a1: the sandbox has 2"},
		{"127.0.0.2", true, ""},
		{"127.0.0.2", false, "a2: the sandbox's owner has 3"},
		{"127.0.0.3", true, ""},
		{"127.0.0.4", false, "c: the node has 4"},
	}
	var first net.Conn
	for i, st := range steps {
		c := open(st.src)
		if (c != nil) != st.admit {
			t.Fatalf("step %d from %s: admitted %v, want %v", i, st.src, c != nil, st.admit)
		}
		if i == 0 {
			first = c
		}
		if st.cap != "" {
			mu.Lock()
			last := reasons[len(reasons)-1]
			mu.Unlock()
			if !strings.HasPrefix(last, st.cap) {
				t.Fatalf("step %d: refusal %q, want it to begin %q", i, last, st.cap)
			}
		}
	}
	first.Close()
	if open("127.0.0.4") == nil {
		t.Fatal("after a connection closed, another owner's sandbox is still refused")
	}
	if open("127.0.0.2") != nil {
		t.Fatal("the node is full again, yet a connection was admitted")
	}
}

// serveLimited listens on loopback through lim and hands each admitted connection to
// the returned channel, which is closed when the listener is.
func serveLimited(t *testing.T, lim *connLimit, port int) (net.Listener, <-chan net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &limitedListener{Listener: inner, lim: lim, port: port}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return inner, accepted
}
