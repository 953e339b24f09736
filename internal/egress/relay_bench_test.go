package egress

import (
	"io"
	"testing"
	"time"
)

// BenchmarkRelay pushes 256 MiB through relay between two loopback TCP connections, as
// a pass-through download goes (upstream → proxy → client), and reports the CPU time
// of the process per GiB (the sender and the receiver are in it too: compare runs).
func BenchmarkRelay(b *testing.B) {
	const size = 256 << 20
	chunk := make([]byte, 1<<20)
	var cpu time.Duration
	for b.Loop() {
		src, upSide := tcpPair(b)     // the upstream writes to src; the proxy holds upSide
		clientSide, dst := tcpPair(b) // the proxy holds clientSide; the client reads dst
		done := make(chan int64)
		go func() {
			n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{dst}, make([]byte, 256<<10))
			done <- n
		}()
		go func() {
			for n := 0; n < size; n += len(chunk) {
				src.Write(chunk)
			}
			src.Close()
		}()
		t0 := selfCPU()
		relayed := make(chan int64)
		go func() { _, down := relay(clientSide, upSide); relayed <- down }()
		if n := <-done; n != size {
			b.Fatalf("received %d bytes, want %d", n, size)
		}
		dst.Close()
		if n := <-relayed; n != size {
			b.Fatalf("relay counted %d bytes down, want %d", n, size)
		}
		cpu += selfCPU() - t0
	}
	b.SetBytes(size)
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N)*float64(1<<30)/size, "cpu-ms/GiB")
}
