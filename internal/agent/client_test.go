package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// endless writes stdout frames until the client hangs up, counting what it sent; after a
// Cancel it answers with a cancelled result when polite, or keeps going when not.
func endless(polite bool, sent *atomic.Int64) func(net.Conn) {
	return func(conn net.Conn) {
		cancelled := make(chan struct{})
		go func() {
			for {
				t, _, err := agentproto.ReadFrame(conn)
				if err != nil {
					return
				}
				if t == agentproto.FrameCancel {
					close(cancelled)
					return
				}
			}
		}()
		chunk := make([]byte, 64<<10)
		for {
			select {
			case <-cancelled:
				if polite {
					b, _ := json.Marshal(agentproto.ExitResult{State: agentproto.StateCancelled, ExitCode: -1})
					agentproto.WriteFrame(conn, agentproto.FrameResult, b)
					return
				}
				cancelled = nil
			default:
			}
			if agentproto.WriteFrame(conn, agentproto.FrameStdout, chunk) != nil {
				return
			}
			sent.Add(int64(len(chunk)))
		}
	}
}

func TestClientStopsOutputPastMaxRead(t *testing.T) {
	const limit = 1 << 20
	for _, polite := range []bool{true, false} {
		var sent atomic.Int64
		c := fakeAgent(t, endless(polite, &sent))
		c.MaxRead = limit
		var got countWriter
		res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"yes"}}, nil, &got, nil)
		if got.n > limit {
			t.Errorf("polite=%v: %d bytes of output delivered; want at most MaxRead %d", polite, got.n, limit)
		}
		if polite {
			if err != nil || res.State != agentproto.StateCancelled || !strings.Contains(res.Error, "stopped") {
				t.Errorf("polite agent: result %+v, err %v; want a cancelled result that says the command was stopped", res, err)
			}
			continue
		}
		if !errors.Is(err, ErrReplyTooLarge) {
			t.Errorf("agent that keeps sending: err = %v; want ErrReplyTooLarge", err)
		}
	}
}

func TestClientDeadlines(t *testing.T) {
	old := callTimeout
	callTimeout = 200 * time.Millisecond
	defer func() { callTimeout = old }()
	silent := func(conn net.Conn) { io.Copy(io.Discard, conn) }
	c := fakeAgent(t, silent)
	if err := c.Ping(ctxT(t)); !errors.Is(err, ErrReplyTimeout) {
		t.Errorf("Ping of a silent agent: err = %v; want ErrReplyTimeout", err)
	}
}

func TestClientRefusesOversizeFrame(t *testing.T) {
	c := fakeAgent(t, func(conn net.Conn) {
		conn.Write([]byte{byte(agentproto.FrameResult), 0xff, 0xff, 0xff, 0xff})
	})
	if err := c.Ping(ctxT(t)); !errors.Is(err, agentproto.ErrFrameTooLarge) {
		t.Errorf("Ping answered by a 4 GiB frame header: err = %v; want ErrFrameTooLarge", err)
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
