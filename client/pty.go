package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
)

// ptyProtocol is the Upgrade token of the PTY route.
const ptyProtocol = "airlock-pty"

// PTY is an interactive terminal in a sandbox. Read returns the terminal's output until
// the process ends (then io.EOF); Write sends keystrokes. Read and Wait may not be
// called concurrently with each other; Write, Resize and CloseStdin may be called from
// any goroutine.
type PTY struct {
	ctx  context.Context
	conn net.Conn
	r    *bufio.Reader
	stop func() bool // unregisters the close-on-cancel hook

	wmu sync.Mutex // serialises frame writes

	rmu     sync.Mutex // guards the read side below
	pending []byte     // output not yet returned by Read
	res     *api.ExecResult
	err     error // how the read side ended, if not with a result
}

// PTY starts argv (a login shell when empty) on a terminal of rows×cols in the sandbox.
// Cancelling ctx closes the connection, which ends the process.
func (c *Client) PTY(ctx context.Context, ref string, rows, cols uint16, argv []string) (*PTY, error) {
	q := url.Values{}
	if rows > 0 {
		q.Set("rows", strconv.Itoa(int(rows)))
	}
	if cols > 0 {
		q.Set("cols", strconv.Itoa(int(cols)))
	}
	for _, a := range argv {
		q.Add("cmd", a)
	}
	u := c.base + sandboxPath(ref, "pty")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", ptyProtocol)
	c.authorize(req.Header)

	var d net.Dialer
	conn, err := d.DialContext(ctx, c.network, c.address)
	if err == nil && c.tls != nil {
		cfg := c.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(c.address)
		}
		tc := tls.Client(conn, cfg)
		if err = tc.HandshakeContext(ctx); err != nil {
			conn.Close()
		}
		conn = tc
	}
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	ok := false
	defer func() {
		if !ok {
			stop()
			conn.Close()
		}
	}()
	if err := req.Write(conn); err != nil {
		return nil, c.transportError(ctx, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return nil, fmt.Errorf("pty: daemon answered %s instead of switching protocols", resp.Status)
		}
		return nil, decodeError(resp)
	}
	ok = true
	return &PTY{ctx: ctx, conn: conn, r: br, stop: stop}, nil
}

// Read returns terminal output; io.EOF once the process has ended.
func (p *PTY) Read(b []byte) (int, error) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	for len(p.pending) == 0 {
		if err := p.ended(); err != nil {
			return 0, err
		}
		p.next()
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

// Wait returns how the process ended, discarding output that Read has not returned.
func (p *PTY) Wait() (*api.ExecResult, error) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	for p.res == nil && p.err == nil {
		p.next()
	}
	p.pending = nil
	return p.res, p.err
}

// ended is io.EOF after the result, the failure after a failure, nil while running.
func (p *PTY) ended() error {
	switch {
	case p.res != nil:
		return io.EOF
	case p.err != nil:
		return p.err
	}
	return nil
}

// next reads one frame from the daemon. The caller holds rmu.
func (p *PTY) next() {
	t, payload, err := agentproto.ReadFrame(p.r)
	if err != nil {
		if p.ctx.Err() != nil {
			err = p.ctx.Err()
		} else {
			err = fmt.Errorf("pty: %w", err)
		}
		p.finish(nil, err)
		return
	}
	switch t {
	case agentproto.FrameStdout, agentproto.FrameStderr:
		p.pending = payload
	case agentproto.FrameResult:
		var res api.ExecResult
		if err := json.Unmarshal(payload, &res); err != nil {
			p.finish(nil, fmt.Errorf("pty: decode result: %w", err))
			return
		}
		p.finish(&res, nil)
	case agentproto.FrameError:
		var re agentproto.RemoteError
		if err := json.Unmarshal(payload, &re); err != nil {
			p.finish(nil, fmt.Errorf("pty: decode error: %w", err))
			return
		}
		p.finish(nil, streamError(&api.Error{Code: re.Code, Message: re.Message}))
	}
}

func (p *PTY) finish(res *api.ExecResult, err error) {
	p.res, p.err = res, err
	p.stop()
	p.conn.Close()
}

// Write sends b to the terminal's input.
func (p *PTY) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	n := 0
	for n < len(b) {
		chunk := b[n:min(len(b), n+agentproto.MaxPayload)]
		if err := agentproto.WriteFrame(p.conn, agentproto.FrameStdin, chunk); err != nil {
			return n, p.writeError(err)
		}
		n += len(chunk)
	}
	return n, nil
}

// Resize changes the terminal's size.
func (p *PTY) Resize(rows, cols uint16) error {
	b, err := json.Marshal(agentproto.Resize{Rows: rows, Cols: cols})
	if err != nil {
		return err
	}
	return p.frame(agentproto.FrameResize, b)
}

// CloseStdin ends the terminal's input.
func (p *PTY) CloseStdin() error { return p.frame(agentproto.FrameStdinClose, nil) }

// Close drops the connection, which ends the process if it is still running.
func (p *PTY) Close() error {
	p.stop()
	err := p.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (p *PTY) frame(t agentproto.FrameType, b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := agentproto.WriteFrame(p.conn, t, b); err != nil {
		return p.writeError(err)
	}
	return nil
}

func (p *PTY) writeError(err error) error {
	if p.ctx.Err() != nil {
		return p.ctx.Err()
	}
	return fmt.Errorf("pty: %w", err)
}
