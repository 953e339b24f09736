package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// tripCounter is a TCP proxy in front of PostgreSQL that counts round trips: each
// burst a client sends after the server last answered it is one.
type tripCounter struct {
	ln    net.Listener
	trips atomic.Int64
	wg    sync.WaitGroup
}

// countTrips starts a proxy to dsn's server and returns the DSN through it.
func countTrips(tb testing.TB, dsn string) (*tripCounter, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tc := &tripCounter{ln: ln}
	target := u.Host
	tc.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc.wg.Go(func() { tc.relay(c, target) })
		}
	})
	tb.Cleanup(func() { ln.Close(); tc.wg.Wait() })
	u.Host = ln.Addr().String()
	return tc, u.String()
}

func (tc *tripCounter) relay(c net.Conn, target string) {
	defer c.Close()
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer s.Close()
	var answered atomic.Bool // the server spoke since the client last did
	answered.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				answered.Store(true)
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if answered.Swap(false) {
				tc.trips.Add(1)
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	s.Close()
	<-done
}

// BenchmarkCreateRoundTrips reports the PostgreSQL round trips of one create on a node
// of a cluster (roundtrips/create; the fake runtime, the host image, admitted against
// the node's memory) and of one
// placement (roundtrips/place: the nodes, and one sum of every node's reservations).
// Lease renewals and loops that fall inside the window count too: a few per second.
func BenchmarkCreateRoundTrips(b *testing.B) {
	tc, dsn := countTrips(b, pgtest.Start(b).CreateDatabase(b))
	// A node's size, so that each create is admitted against it as on a real node.
	n := NewFakeNode(b, FakeOptions{StoreDSN: dsn, Config: func(c *manager.Config) { c.HostMemory = 64 << 30 }})
	ctx := context.Background()
	var trips int64
	for i := 0; b.Loop(); i++ {
		before := tc.trips.Load()
		if _, err := n.Client.Create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("rt-%d", i)}); err != nil {
			b.Fatal(err)
		}
		trips += tc.trips.Load() - before
		b.StopTimer()
		if _, err := n.Client.Terminate(ctx, fmt.Sprintf("rt-%d", i)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/create")
	before := tc.trips.Load()
	const places = 20
	for range places {
		if _, err := n.Manager.Place(ctx, manager.PlaceRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tc.trips.Load()-before)/places, "roundtrips/place")
}
