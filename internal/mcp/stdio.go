package mcp

import (
	"context"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stdio is the transport of a server its client starts: MCP over r and w. When r ends,
// every request read before its end is still answered, and only then does the session
// end, so requests piped in (`printf ... | airlock mcp`) get their answers.
func Stdio(r io.Reader, w io.Writer) mcpsdk.Transport {
	return answerAll{&mcpsdk.IOTransport{Reader: io.NopCloser(r), Writer: nopWriteCloser{w}}}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// answerAll is a transport whose connections hold back the end of their input until
// every call read has been answered.
type answerAll struct{ mcpsdk.Transport }

func (t answerAll) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &answeringConn{Connection: c, pending: map[jsonrpc.ID]struct{}{}, closed: make(chan struct{})}, nil
}

// answeringConn counts the calls read and not yet answered. The session cancels every
// call still in flight once Read fails, so Read returns its end only when none is left
// (or the connection is closed, or ctx ends).
type answeringConn struct {
	mcpsdk.Connection
	mu       sync.Mutex
	pending  map[jsonrpc.ID]struct{}
	answered chan struct{} // closed when pending empties, while Read waits for it
	closed   chan struct{}
	close    sync.Once
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.waitAnswered(ctx)
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.mu.Lock()
		c.pending[req.ID] = struct{}{}
		c.mu.Unlock()
	}
	return msg, nil
}

func (c *answeringConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		delete(c.pending, resp.ID)
		if len(c.pending) == 0 && c.answered != nil {
			close(c.answered)
			c.answered = nil
		}
		c.mu.Unlock()
	}
	return err
}

func (c *answeringConn) Close() error {
	c.close.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

// waitAnswered returns once every call read has been answered.
func (c *answeringConn) waitAnswered(ctx context.Context) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	answered := make(chan struct{})
	c.answered = answered
	c.mu.Unlock()
	select {
	case <-answered:
	case <-c.closed:
	case <-ctx.Done():
	}
}
