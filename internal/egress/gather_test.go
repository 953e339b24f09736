package egress

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter counts the writes made to the connection under it.
type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (c *writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// gatheredPair is a TLS connection terminated by tlsServerGathered over loopback TCP,
// its handshake done, with the writes under the server counted, and the client's end.
func gatheredPair(t *testing.T) (srv *gatherTLS, under *writeCounter, client *tls.Conn) {
	t.Helper()
	ca, err := NewCA("gather test")
	if err != nil {
		t.Fatal(err)
	}
	c, s := tcpPair(t)
	under = &writeCounter{Conn: s}
	srv = tlsServerGathered(under, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf("files.example.test")
	}})
	client = tls.Client(c, &tls.Config{RootCAs: ca.Pool(), ServerName: "files.example.test"})
	c.SetDeadline(time.Now().Add(20 * time.Second))
	s.SetDeadline(time.Now().Add(20 * time.Second))
	done := make(chan error, 1)
	go func() { done <- client.Handshake() }()
	// The handshake's own writes are not held back: it completes.
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return srv, under, client
}

// TestGatherTLSOneWritePerWrite: a write of many records reaches the connection in one
// write (without gathering, one a record), the client reads exactly what was written,
// the buffer goes back to the pool after each write, and close_notify, written outside
// a write, reaches the client (it sees a clean end).
func TestGatherTLSOneWritePerWrite(t *testing.T) {
	srv, under, client := gatheredPair(t)
	want := make([]byte, 200<<10+7) // 13 records of at most 16 KiB
	rand.Read(want)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(client); got <- b }()
	held := relayBigHeld.Load()
	for i := range 3 {
		before := under.writes.Load()
		if n, err := srv.Write(want[i*len(want)/3 : (i+1)*len(want)/3]); err != nil || n != len(want)/3 {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
		if w := under.writes.Load() - before; w != 1 {
			t.Errorf("a write of %d bytes made %d writes to the connection, want 1", len(want)/3, w)
		}
		if h := relayBigHeld.Load(); h > held {
			t.Errorf("after a write, %d big buffers are held, want at most %d: the write kept its buffer", h, held)
		}
	}
	srv.Write(want[3*(len(want)/3):])
	before := under.writes.Load()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if w := under.writes.Load() - before; w != 1 {
		t.Errorf("Close made %d writes to the connection, want 1 (its close_notify)", w)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the client read %d bytes, not the %d written (or not the same)", len(b), len(want))
	}
}

// TestGatherTLSPastThePoolsBound: past the node-wide bound on big buffers, a write
// gathers into a small one, flushing it whenever full, and the bytes still arrive
// whole and in order.
func TestGatherTLSPastThePoolsBound(t *testing.T) {
	defer func(n int64) { relayBigMax = n }(relayBigMax)
	relayBigMax = 0
	srv, under, client := gatheredPair(t)
	want := make([]byte, 100<<10+3)
	rand.Read(want)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(client); got <- b }()
	before := under.writes.Load()
	if _, err := srv.Write(want); err != nil {
		t.Fatal(err)
	}
	if w := under.writes.Load() - before; w < 2 {
		t.Errorf("a write of %d bytes through a buffer of %d made %d writes, want several", len(want), relaySmallSize, w)
	}
	srv.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the client read %d bytes, not the %d written (or not the same)", len(b), len(want))
	}
}

// TestGatherTLSCloseDuringAStalledWrite: a Close while a write waits on a client that
// reads nothing, its records gathered and being written, ends it at once (as tls.Conn
// does for a write of its own under way), not after close_notify's five seconds.
func TestGatherTLSCloseDuringAStalledWrite(t *testing.T) {
	srv, under, client := gatheredPair(t)
	// Small socket buffers, so the client's unread bytes soon stall the writer.
	under.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10)
	client.NetConn().(*net.TCPConn).SetReadBuffer(4 << 10)
	chunk := make([]byte, 200<<10) // fits one gathered buffer: written when the Write ends
	done := make(chan error, 1)
	var writes atomic.Int64
	go func() {
		for {
			if _, err := srv.Write(chunk); err != nil {
				done <- err
				return
			}
			writes.Add(1)
		}
	}()
	// Wait until the writer is stuck (no Write has returned for a while).
	for last := int64(-1); ; {
		time.Sleep(200 * time.Millisecond)
		if n := writes.Load(); n == last {
			break
		} else {
			last = n
		}
	}
	if srv.writing.Load() == 0 {
		t.Fatal("the writer is not inside a Write")
	}
	t0 := time.Now()
	srv.Close()
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Close took %v during a stalled write, want it at once", d)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the stalled write ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled write did not end after Close")
	}
}
