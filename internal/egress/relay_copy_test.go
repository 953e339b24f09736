package egress

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if client, err = net.Dial("tcp4", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if server, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestRelayCopiesBothWaysAndCounts: relay passes every byte both ways at once, in order,
// passes a half-close on (the download goes on after the client's end of upload), and
// counts exactly what it passed, as the audit records it.
func TestRelayCopiesBothWaysAndCounts(t *testing.T) {
	client, clientSide := tcpPair(t) // the sandbox's end and the proxy's
	upSide, upstream := tcpPair(t)   // the proxy's end and the upstream's
	upload, download := make([]byte, 3<<20+17), make([]byte, 9<<20+5)
	rand.Read(upload)
	rand.Read(download)

	type counts struct{ sent, received int64 }
	relayed := make(chan counts)
	go func() {
		s, r := relay(clientSide, upSide)
		relayed <- counts{s, r}
	}()
	gotUp := make(chan []byte)
	go func() { // the upstream reads the whole upload, then answers
		b, _ := io.ReadAll(upstream)
		gotUp <- b
	}()
	go func() {
		client.Write(upload)
		client.(*net.TCPConn).CloseWrite()
	}()
	if b := <-gotUp; !bytes.Equal(b, upload) {
		t.Fatalf("the upstream got %d bytes, not the %d sent (or not the same)", len(b), len(upload))
	}
	go func() {
		upstream.Write(download)
		upstream.Close()
	}()
	client.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(b, download) {
		t.Fatalf("the client got %d bytes (%v), not the %d sent (or not the same)", len(b), err, len(download))
	}
	if c := <-relayed; c.sent != int64(len(upload)) || c.received != int64(len(download)) {
		t.Errorf("relay counted %d up and %d down, want %d and %d", c.sent, c.received, len(upload), len(download))
	}
}

// TestRelayIdleHoldsNoBuffer: a relayed connection waiting for bytes holds none of the
// relay's buffers, so many idle connections cost their goroutines, not 2×256 KiB each.
func TestRelayIdleHoldsNoBuffer(t *testing.T) {
	const conns = 100
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var clients []net.Conn
	for range conns {
		client, clientSide := tcpPair(t)
		upSide, upstream := tcpPair(t)
		go relay(clientSide, upSide)
		// One byte each way first: a buffer was taken and given back.
		client.Write([]byte{1})
		upstream.Write([]byte{2})
		one := make([]byte, 1)
		io.ReadFull(upstream, one)
		io.ReadFull(client, one)
		clients = append(clients, client, upstream)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held := int64(after.HeapInuse) - int64(before.HeapInuse)
	if perConn := held / conns; perConn > relayBufSize/4 {
		t.Errorf("%d idle relayed connections hold %d heap bytes, %d each: buffers are held while idle", conns, held, perConn)
	}
	for _, c := range clients {
		c.Close()
	}
}

// stalled is a writer that never returns, as a relay's write to a peer that reads
// nothing; it notes the size of the first write it got.
type stalled struct {
	got     chan int
	release chan struct{}
}

func (s stalled) Write(p []byte) (int, error) {
	s.got <- len(p)
	<-s.release
	return 0, io.ErrClosedPipe
}

// TestRelayStalledWritesHoldBoundedBuffers: relays whose writes wait (a peer that reads
// nothing) hold at most relayBigMax big buffers together; past that each holds a small
// one, so a sandbox's thousands of stalled connections cannot pin 256 KiB each.
func TestRelayStalledWritesHoldBoundedBuffers(t *testing.T) {
	defer func(n int64) { relayBigMax = n }(relayBigMax)
	relayBigMax = 2
	const conns = 5
	w := stalled{got: make(chan int, conns), release: make(chan struct{})}
	defer close(w.release)
	for range conns {
		src, srcSide := tcpPair(t)
		if _, err := src.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // all of it queued, for one big read
		go copyPooled(w, srcSide)
	}
	big := 0
	for range conns {
		select {
		case n := <-w.got:
			if n > relaySmallSize {
				big++
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a relay wrote nothing")
		}
	}
	if big > 2 {
		t.Errorf("%d of %d stalled relays hold a write of more than %d bytes, want at most relayBigMax (2)", big, conns, relaySmallSize)
	}
	if big == 0 {
		t.Errorf("no stalled relay got a big buffer")
	}
}
