package egress

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkRelay pushes 256 MiB from a sender to a receiver over loopback TCP, through
// relay as a pass-through download goes (upstream → proxy → client), and, as its peer,
// over one connection without it; each reports the CPU time of the process per GiB
// (sender, receiver and relay are all in it: the difference is the relay's hop).
func BenchmarkRelay(b *testing.B) {
	const size = 256 << 20
	run := func(b *testing.B, hop bool) {
		chunk := make([]byte, 1<<20)
		var cpu time.Duration
		for b.Loop() {
			src, dst := tcpPair(b) // the upstream writes to src; the client reads dst
			var relayed chan int64
			if hop {
				upSide, clientSide := dst, net.Conn(nil) // the proxy holds upSide and clientSide
				clientSide, dst = tcpPair(b)
				relayed = make(chan int64, 1)
				go func() { _, down := relay(clientSide, upSide); relayed <- down }()
			}
			t0 := selfCPU()
			go func() {
				for n := 0; n < size; n += len(chunk) {
					src.Write(chunk)
				}
				src.Close()
			}()
			n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{dst}, make([]byte, 256<<10))
			if n != size {
				b.Fatalf("received %d bytes, want %d", n, size)
			}
			dst.Close()
			if hop {
				if n := <-relayed; n != size {
					b.Fatalf("relay counted %d bytes down, want %d", n, size)
				}
			}
			cpu += selfCPU() - t0
		}
		b.SetBytes(size)
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N)*float64(1<<30)/size, "cpu-ms/GiB")
	}
	b.Run("relayed", func(b *testing.B) { run(b, true) })
	b.Run("direct", func(b *testing.B) { run(b, false) })
}
