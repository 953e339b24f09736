package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
	airlockrt "github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/testenv"
)

// An agent is the sandbox's: whoever is root in a sandbox can kill it, or take over what
// it sends. hostileDriver hands the daemon, for the sandboxes a test names, a connection
// to an agent that misbehaves on purpose instead of the real one.
type hostileDriver struct {
	airlockrt.Driver
	mu    sync.Mutex
	agent map[string]behaviour // sandbox id -> the behaviour its agent has
	conns sync.WaitGroup
}

func (d *hostileDriver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	d.mu.Lock()
	behave := d.agent[id]
	d.mu.Unlock()
	if behave == nil {
		return d.Driver.DialAgent(ctx, id)
	}
	daemonSide, agentSide := net.Pipe()
	d.conns.Add(1)
	go func() {
		defer d.conns.Done()
		defer agentSide.Close()
		_, p, err := agentproto.ReadFrame(agentSide)
		if err != nil {
			return
		}
		req, err := agentproto.DecodeRequest(p)
		if err != nil {
			return
		}
		behave(agentSide, req)
	}()
	return daemonSide, nil
}

// behaviour is what a hostile agent does with one call's connection and request.
type behaviour func(c net.Conn, req *agentproto.Request)

func (d *hostileDriver) set(id string, behave behaviour) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.agent[id] = behave
}

// Hostile behaviours. Each writes until the daemon hangs up (a write fails).
func damagedFrame(c net.Conn, _ *agentproto.Request) {
	var b bytes.Buffer
	agentproto.WriteFrame(&b, agentproto.FrameResult, []byte(`{"state":"succeeded"}`))
	raw := b.Bytes()
	raw[len(raw)-1] ^= 0xff // the checksum no longer matches
	c.Write(raw)
	io.Copy(io.Discard, c)
}

func oversizedFrame(c net.Conn, _ *agentproto.Request) {
	var hdr [5]byte
	hdr[0] = byte(agentproto.FrameStdout)
	binary.BigEndian.PutUint32(hdr[1:], 1<<31) // 2 GiB promised
	c.Write(hdr[:])
	io.Copy(io.Discard, c)
}

func unknownFrame(c net.Conn, _ *agentproto.Request) {
	agentproto.WriteFrame(c, agentproto.FrameType('?'), []byte("what is this"))
	io.Copy(io.Discard, c)
}

func endlessOutput(c net.Conn, _ *agentproto.Request) {
	go io.Copy(io.Discard, c) // Cancel frames are read, and ignored
	chunk := bytes.Repeat([]byte{0}, agentproto.MaxPayload)
	for agentproto.WriteFrame(c, agentproto.FrameStdout, chunk) == nil {
	}
}

func slowFrames(c net.Conn, _ *agentproto.Request) {
	go io.Copy(io.Discard, c)
	var b bytes.Buffer
	agentproto.WriteFrame(&b, agentproto.FrameStdout, bytes.Repeat([]byte("x"), 1<<16))
	for _, x := range b.Bytes() {
		if _, err := c.Write([]byte{x}); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fileSize is what endlessFile's stat claims.
const fileSize = 3 << 20

func silent(c net.Conn, _ *agentproto.Request) { io.Copy(io.Discard, c) }

// endlessFile says the file has fileSize bytes, then sends file bytes that never end.
func endlessFile(c net.Conn, req *agentproto.Request) {
	if req.Op == agentproto.OpFileStat {
		b, _ := json.Marshal(agentproto.FileInfo{Name: "f", Size: fileSize, Mode: 0o644})
		agentproto.WriteFrame(c, agentproto.FrameResult, b)
		return
	}
	go io.Copy(io.Discard, c)
	chunk := bytes.Repeat([]byte("A"), agentproto.MaxPayload)
	for agentproto.WriteFrame(c, agentproto.FrameData, chunk) == nil {
	}
}

// lyingStat answers a stat with a name full of terminal escapes and absurd numbers.
func lyingStat(c net.Conn, _ *agentproto.Request) {
	agentproto.WriteFrame(c, agentproto.FrameResult, []byte(`{"name":"\u001b]0;owned\u0007\u001b[2J","path":"/../../etc/shadow","size":-9223372036854775808,"mode":4294967295,"is_dir":true}`))
	io.Copy(io.Discard, c)
}

// TestHostileAgent replaces one owner's sandbox agent with agents that send damaged,
// oversized, unknown, endless and slow frames, never answer, and lie in file replies.
// Each call fails or is bounded with a clear error, the daemon's memory stays bounded,
// its goroutines come back, the sandbox's record stays whole, and another owner's real
// sandbox runs commands correctly all along.
func TestHostileAgent(t *testing.T) {
	hd := &hostileDriver{agent: map[string]behaviour{}}
	n := testenv.NewNode(t, testenv.Options{Owners: []string{"mallory", "bob"},
		WrapDriver: func(d airlockrt.Driver) airlockrt.Driver { hd.Driver = d; return hd }})
	mallory, bob := n.As(t, "mallory"), n.As(t, "bob")
	m, err := mallory.Create(background, api.CreateSandboxRequest{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Create(background, api.CreateSandboxRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	id := m.Sandbox.ID

	// Bob's sandbox runs commands throughout, and every one must answer right.
	stop := make(chan struct{})
	var bobRuns, bobWrong atomic.Int64
	var bobErr atomic.Value
	var bystander sync.WaitGroup
	bystander.Add(1)
	go func() {
		defer bystander.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := bob.Exec(background, "b", api.ExecRequest{Shell: "echo ok-$((6*7))", Timeout: "60s"})
			bobRuns.Add(1)
			if err != nil || res.ExitCode != 0 || res.Stdout != "ok-42\n" {
				bobWrong.Add(1)
				bobErr.Store(errors.Join(err, errors.New(res2str(res))))
			}
		}
	}()
	// The process's heap is sampled throughout: the daemon runs in it.
	var peak atomic.Uint64
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	goroutinesBefore := runtime.NumGoroutine()

	exec := func(ctx context.Context) error {
		_, err := mallory.Exec(ctx, "m", api.ExecRequest{Shell: "true", Timeout: "60s"})
		return err
	}
	cases := []struct {
		name   string
		behave behaviour
		call   func(context.Context) error
	}{
		{"damaged frame", damagedFrame, exec},
		{"oversized frame", oversizedFrame, exec},
		{"unknown frame", unknownFrame, exec},
		{"endless output to a non-streamed exec", endlessOutput, exec},
		{"endless output to a streamed exec", endlessOutput, func(ctx context.Context) error {
			_, err := mallory.ExecStream(ctx, "m", api.ExecRequest{Shell: "true", Timeout: "60s"}, io.Discard, io.Discard)
			return err
		}},
		{"slow frames", slowFrames, exec},
		{"no reply", silent, exec},
		{"endless file", endlessFile, func(ctx context.Context) error {
			// The daemon stops reading at the size the stat gave: the caller gets that
			// many bytes, not an endless body, and not only when it gives up.
			n, err := mallory.Download(ctx, "m", "/f", io.Discard)
			if n != fileSize || ctx.Err() != nil {
				t.Errorf("download of an endless file: %d bytes, %v (context %v); want %d bytes before the caller gives up", n, err, ctx.Err(), fileSize)
			}
			return errors.New("bounded")
		}},
		{"lying stat", lyingStat, func(ctx context.Context) error {
			fi, err := mallory.Stat(ctx, "m", "/x")
			if err == nil {
				t.Errorf("a stat reply with a negative size and a name with escapes and slashes was passed on: %+v", fi)
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hd.set(id, tc.behave)
			defer hd.set(id, nil)
			// The caller gives up after a few seconds, as a real client would; the
			// daemon must then let go of everything the call held.
			ctx, cancel := context.WithTimeout(background, 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the call succeeded against an agent that never answered right")
				}
				t.Logf("%s: %v", tc.name, err)
			case <-time.After(2 * time.Minute):
				t.Fatalf("the call did not return in 2 minutes")
			}
		})
	}
	// A flood: many calls at once against an agent that never answers.
	t.Run("flood of calls", func(t *testing.T) {
		hd.set(id, silent)
		defer hd.set(id, nil)
		ctx, cancel := context.WithTimeout(background, 3*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() { defer wg.Done(); exec(ctx) }()
		}
		wg.Wait()
	})

	// The hostile connections end: the daemon hung up on each of them.
	ended := make(chan struct{})
	go func() { hd.conns.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the daemon still holds connections to the hostile agent a minute after the calls ended")
	}
	close(stop)
	bystander.Wait()
	<-sampling

	if bobWrong.Load() > 0 || bobRuns.Load() == 0 {
		t.Errorf("another owner's sandbox: %d of %d execs went wrong (last: %v)", bobWrong.Load(), bobRuns.Load(), bobErr.Load())
	}
	if p := peak.Load(); p > 256<<20 {
		t.Errorf("the heap reached %d MiB while the hostile agent sent endless output; want under 256 MiB", p>>20)
	}
	// The goroutines the calls used are gone (a few may still be winding down).
	var now int
	for range 50 {
		if now = runtime.NumGoroutine(); now <= goroutinesBefore+10 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now > goroutinesBefore+10 {
		t.Errorf("%d goroutines after the hostile calls, %d before", now, goroutinesBefore)
	}
	// The sandbox's record is whole, and once its real agent is back it works.
	sb, err := mallory.Get(background, "m")
	if err != nil || sb.ID != id || sb.State != "running" {
		t.Fatalf("the sandbox after the hostile agent: %v, %+v; want it running", err, sb)
	}
	res, err := mallory.Exec(background, "m", api.ExecRequest{Shell: "echo back", Timeout: "60s"})
	if err != nil || res.Stdout != "back\n" {
		t.Fatalf("the sandbox's real agent after the hostile one: %v, %+v", err, res)
	}
	t.Logf("bystander execs: %d, heap peak: %d MiB", bobRuns.Load(), peak.Load()>>20)
}

func res2str(r *api.ExecResult) string {
	if r == nil {
		return "no result"
	}
	return "exit " + r.State + ": " + r.Stdout + r.Stderr
}
