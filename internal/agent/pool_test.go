package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// pooled is a client whose calls reach the agent on sock through a Pool, and a count
// of the connections the pool dialled.
func pooled(sock string) (*Client, *Pool, *atomic.Int32) {
	var dials atomic.Int32
	pool := NewPool(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	return &Client{Dial: pool.Dial}, pool, &dials
}

func execOut(ctx context.Context, c *Client, argv ...string) (string, *agentproto.ExitResult, error) {
	var out bytes.Buffer
	res, err := c.Exec(ctx, agentproto.ExecSpec{Argv: argv}, nil, &out, io.Discard)
	return out.String(), res, err
}

func TestPoolKeepsConnection(t *testing.T) {
	sock, _ := serveAgent(t, Options{})
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	for i := range 5 {
		out, res, err := execOut(ctx, c, "echo", fmt.Sprint(i))
		if err != nil || res.State != agentproto.StateSucceeded || out != fmt.Sprintf("%d\n", i) {
			t.Fatalf("exec %d: %q, %+v, %v", i, out, res, err)
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("5 execs and a ping dialled %d connections, want 1 kept", n)
	}
	if n := pool.Idle(); n != 1 {
		t.Errorf("pool holds %d idle connections, want 1", n)
	}
	// A failed start ends the call with a result and keeps the connection too.
	if _, res, err := execOut(ctx, c, "/no/such/program"); err != nil || res.ExitCode != 127 {
		t.Fatalf("exec of a missing program: %+v, %v; want exit code 127", res, err)
	}
	if _, _, err := execOut(ctx, c, "true"); err != nil || dials.Load() != 1 {
		t.Errorf("exec after a failed start: %v, %d dials, want 1", err, dials.Load())
	}
}

// Calls that may leave the connection unfit for another are never kept: stdin, a
// cancelled exec, another op.
func TestPoolDropsUnfitConnections(t *testing.T) {
	sock, root := serveAgent(t, Options{})
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	if _, err := c.Exec(ctx, agentproto.ExecSpec{Argv: []string{"cat"}}, strings.NewReader("x"), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := pool.Idle(); n != 0 {
		t.Errorf("after an exec with stdin the pool holds %d connections, want 0", n)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	res, err := c.Exec(cctx, agentproto.ExecSpec{Argv: []string{"sleep", "10"}}, nil, io.Discard, io.Discard)
	cancel()
	if err != nil || res.State != agentproto.StateCancelled {
		t.Fatalf("cancelled exec: %+v, %v", res, err)
	}
	if n := pool.Idle(); n != 0 {
		t.Errorf("after a cancelled exec the pool holds %d connections, want 0", n)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	if n := pool.Idle(); n != 0 {
		t.Errorf("after a stat the pool holds %d connections, want 0", n)
	}
	if n := dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3", n)
	}
}

func TestPoolConcurrentExecs(t *testing.T) {
	sock, _ := serveAgent(t, Options{})
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				want := fmt.Sprintf("%d-%d", g, i)
				out, res, err := execOut(ctx, c, "echo", want)
				if err != nil || res.State != agentproto.StateSucceeded || out != want+"\n" {
					errs <- fmt.Errorf("exec %s: %q, %+v, %v", want, out, res, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := pool.Idle(); n > poolMax {
		t.Errorf("pool holds %d idle connections, want at most %d", n, poolMax)
	}
	if n := dials.Load(); n >= 8*20 {
		t.Errorf("160 execs dialled %d connections: none kept", n)
	}
}

// A kept connection whose agent has gone is not used: the call dials anew, and reaches
// the agent now serving there.
func TestPoolAgentRestarted(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	serve := func() (stop func()) {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, ln, Options{Root: t.TempDir(), Env: os.Environ()}) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	}
	stop := serve()
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	if _, _, err := execOut(ctx, c, "true"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	stop()
	if d := time.Since(t0); d > 900*time.Millisecond {
		t.Errorf("the agent took %v to shut down with a kept connection open; it waits for none", d)
	}
	stop = serve()
	defer stop()
	out, res, err := execOut(ctx, c, "echo", "again")
	if err != nil || res.State != agentproto.StateSucceeded || out != "again\n" {
		t.Fatalf("exec after the agent restarted: %q, %+v, %v", out, res, err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2 (the dead connection dropped)", n)
	}
}

// rawAgent answers every connection on a fresh socket with answer.
func rawAgent(t *testing.T, answer func(conn net.Conn)) string {
	sock := filepath.Join(shortDir(t), "f.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer conn.Close(); answer(conn) }()
		}
	}()
	return sock
}

func readReq(conn net.Conn) (*agentproto.Request, error) {
	_, p, err := agentproto.ReadFrame(conn)
	if err != nil {
		return nil, err
	}
	return agentproto.DecodeRequest(p)
}

func okResult() []byte {
	b, _ := json.Marshal(agentproto.ExitResult{State: agentproto.StateSucceeded})
	return b
}

// An agent that writes out of turn on a kept connection (garbage after its answer)
// loses it: the next call goes on a new connection and is not confused by the bytes.
func TestPoolAgentWritesOutOfTurn(t *testing.T) {
	sock := rawAgent(t, func(conn net.Conn) {
		for {
			if _, err := readReq(conn); err != nil {
				return
			}
			// One write, so that the garbage is there when the result is.
			var b bytes.Buffer
			agentproto.WriteFrame(&b, agentproto.FrameResult, okResult())
			b.WriteString("garbage")
			conn.Write(b.Bytes())
		}
	})
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	for range 3 {
		if _, res, err := execOut(ctx, c, "true"); err != nil || res.State != agentproto.StateSucceeded {
			t.Fatalf("exec: %+v, %v", res, err)
		}
	}
	if n := dials.Load(); n != 3 {
		t.Errorf("%d dials for 3 execs, want 3: a connection with unread bytes was used again", n)
	}
}

// An agent that answers garbage, or nothing at all, fails the call within its bounds
// and its connection is not kept.
func TestPoolHostileAgent(t *testing.T) {
	defer func(d time.Duration) { callTimeout = d }(callTimeout)
	callTimeout = 300 * time.Millisecond
	ctx := ctxT(t)
	garbage := rawAgent(t, func(conn net.Conn) {
		readReq(conn)
		conn.Write([]byte("R\x00\x00\x00\x02{}garbage-garbage"))
		io.Copy(io.Discard, conn)
	})
	c, pool, _ := pooled(garbage)
	t.Cleanup(pool.Close)
	if err := c.Ping(ctx); !errors.Is(err, agentproto.ErrChecksum) {
		t.Errorf("ping of an agent answering garbage: %v, want a checksum error", err)
	}
	if n := pool.Idle(); n != 0 {
		t.Errorf("pool kept %d connections of an agent answering garbage", n)
	}
	silent := rawAgent(t, func(conn net.Conn) { io.Copy(io.Discard, conn) })
	c, pool, _ = pooled(silent)
	t.Cleanup(pool.Close)
	t0 := time.Now()
	if err := c.Ping(ctx); !errors.Is(err, ErrReplyTimeout) {
		t.Errorf("ping of a silent agent: %v, want %v", err, ErrReplyTimeout)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("ping of a silent agent took %v", d)
	}
	if n := pool.Idle(); n != 0 {
		t.Errorf("pool kept %d connections of a silent agent", n)
	}
}

// An agent that predates kept connections refuses a request asking for one, having run
// nothing: the call is made again without it, and no later call asks.
func TestPoolAgentWithoutKeep(t *testing.T) {
	var asked, plain atomic.Int32
	sock := rawAgent(t, func(conn net.Conn) {
		_, p, err := agentproto.ReadFrame(conn)
		if err != nil {
			return
		}
		if bytes.Contains(p, []byte(`"keep"`)) { // as an agent without the field decodes it
			asked.Add(1)
			b, _ := json.Marshal(agentproto.RemoteError{Code: "invalid_argument", Message: `decode request: json: unknown field "keep"`})
			agentproto.WriteFrame(conn, agentproto.FrameError, b)
			return
		}
		plain.Add(1)
		agentproto.WriteFrame(conn, agentproto.FrameResult, okResult())
	})
	c, pool, _ := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	for range 3 {
		if _, res, err := execOut(ctx, c, "true"); err != nil || res.State != agentproto.StateSucceeded {
			t.Fatalf("exec: %+v, %v", res, err)
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 1 || plain.Load() != 4 {
		t.Errorf("the old agent saw %d requests asking to keep and %d plain ones, want 1 and 4", asked.Load(), plain.Load())
	}
}

// The agent keeps a connection only when the client sent nothing after its request:
// a frame sent during the exec (here a stray stdin frame) makes it close the
// connection after the result, so that frame is never read as the next request.
func TestAgentKeepsOnlyCleanConnections(t *testing.T) {
	sock, _ := serveAgent(t, Options{})
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	send := func(req agentproto.Request) {
		b, _ := json.Marshal(req)
		if err := agentproto.WriteFrame(conn, agentproto.FrameRequest, b); err != nil {
			t.Fatal(err)
		}
	}
	result := func() agentproto.FrameType {
		for {
			ft, _, err := agentproto.ReadFrame(conn)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if ft == agentproto.FrameResult || ft == agentproto.FrameError {
				return ft
			}
		}
	}
	exec := func(argv ...string) agentproto.Request {
		return agentproto.Request{Op: agentproto.OpExec, Keep: true, Exec: &agentproto.ExecSpec{Argv: argv}}
	}
	send(exec("true"))
	if ft := result(); ft != agentproto.FrameResult {
		t.Fatalf("first exec ended with %q", byte(ft))
	}
	send(exec("sleep", "0.2"))
	agentproto.WriteFrame(conn, agentproto.FrameStdin, []byte("x"))
	if ft := result(); ft != agentproto.FrameResult {
		t.Fatalf("second exec on the kept connection ended with %q", byte(ft))
	}
	if _, _, err := agentproto.ReadFrame(conn); !errors.Is(err, io.EOF) {
		t.Errorf("after a call with a frame sent during it: %v, want the agent to close (EOF)", err)
	}
}

// All pools together keep at most keptMax idle connections.
func TestPoolsKeepAtMostKeptMax(t *testing.T) {
	defer func(n int64) { keptMax = n }(keptMax)
	keptMax = keptTotal.Load() + 1
	ctx := ctxT(t)
	var pools []*Pool
	for range 3 {
		sock, _ := serveAgent(t, Options{})
		c, pool, _ := pooled(sock)
		t.Cleanup(pool.Close)
		if _, _, err := execOut(ctx, c, "true"); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, pool)
	}
	idle := 0
	for _, p := range pools {
		idle += p.Idle()
	}
	if idle != 1 {
		t.Errorf("3 pools hold %d idle connections, want 1 (the bound)", idle)
	}
}

// Quiesce returns once the agent has closed the call's connection after its answer;
// an agent that writes on instead (any amount) has not, and Quiesce says so.
func TestQuiesceWantsTheEnd(t *testing.T) {
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		after []byte
		ok    bool
	}{
		{"closes", nil, true},
		{"writes on", bytes.Repeat([]byte("x"), 4<<10), false},
	} {
		sock := rawAgent(t, func(conn net.Conn) {
			if _, err := readReq(conn); err != nil {
				return
			}
			agentproto.WriteFrame(conn, agentproto.FrameResult, []byte("{}"))
			if tc.after == nil {
				conn.Close()
				return
			}
			conn.Write(tc.after)
			io.Copy(io.Discard, conn) // and keeps the connection
		})
		c, pool, _ := pooled(sock)
		t.Cleanup(pool.Close)
		if err := c.Quiesce(ctx); (err == nil) != tc.ok {
			t.Errorf("%s: Quiesce: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	sock, _ := serveAgent(t, Options{})
	c, pool, _ := pooled(sock)
	t.Cleanup(pool.Close)
	if err := c.Quiesce(ctx); err != nil {
		t.Errorf("Quiesce of a real agent: %v", err)
	}
}

// TestPoolPrime: a connection dialled ahead carries the first call, so the call dials
// nothing; a pool that holds one already dials no other, a closed pool keeps none, and
// a primed connection the agent hung up on is dialled again rather than failing the
// call.
func TestPoolPrime(t *testing.T) {
	sock, _ := serveAgent(t, Options{})
	c, pool, dials := pooled(sock)
	t.Cleanup(pool.Close)
	ctx := ctxT(t)
	for range 2 {
		if err := pool.Prime(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, idle := dials.Load(), pool.Idle(); n != 1 || idle != 1 {
		t.Fatalf("two primes: %d dials, %d idle; want 1 and 1", n, idle)
	}
	if out, res, err := execOut(ctx, c, "echo", "first"); err != nil || res.State != agentproto.StateSucceeded || out != "first\n" {
		t.Fatalf("first exec: %q, %+v, %v", out, res, err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the first exec after a prime dialled: %d dials, want the primed one only", n)
	}

	// The agent hangs up on a primed connection: the call dials again.
	var conns atomic.Int32
	sock2 := rawAgent(t, func(conn net.Conn) {
		if conns.Add(1) == 1 {
			conn.Close()
			return
		}
		if _, err := readReq(conn); err != nil {
			return
		}
		agentproto.WriteFrame(conn, agentproto.FrameResult, []byte("{}"))
	})
	c2, pool2, dials2 := pooled(sock2)
	t.Cleanup(pool2.Close)
	if err := pool2.Prime(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the hang-up arrives
	if err := c2.Ping(ctx); err != nil {
		t.Fatalf("ping after the agent hung up on the primed connection: %v", err)
	}
	if n := dials2.Load(); n != 2 {
		t.Fatalf("%d dials; want 2 (the primed one, then a new one)", n)
	}

	pool2.Close()
	if err := pool2.Prime(ctx); err != nil {
		t.Fatal(err)
	}
	if n, idle := dials2.Load(), pool2.Idle(); n != 2 || idle != 0 {
		t.Fatalf("a closed pool primed: %d dials, %d idle; want 2 (none more) and 0", n, idle)
	}

	// All pools together at their bound: a prime dials nothing it could not keep.
	defer func(n int64) { keptMax = n }(keptMax)
	keptMax = keptTotal.Load()
	_, pool3, dials3 := pooled(sock)
	t.Cleanup(pool3.Close)
	if err := pool3.Prime(ctx); err != nil {
		t.Fatal(err)
	}
	if n, idle := dials3.Load(), pool3.Idle(); n != 0 || idle != 0 {
		t.Fatalf("a prime with all pools at their bound: %d dials, %d idle; want 0 and 0", n, idle)
	}
}
