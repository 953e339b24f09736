package manager

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"slices"
	"sync"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// terminalConn is a terminal's connection to the sandbox's agent. It passes the
// agent's frames on unchanged, noticing among them the result that says how the
// terminal's process ended, and records the terminal's end once, when it is closed.
type terminalConn struct {
	net.Conn
	scan frameScan
	once sync.Once
	end  func(res *agentproto.ExitResult) // res nil: closed before the process ended
}

func (c *terminalConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.scan.feed(b[:n])
	return n, err
}

func (c *terminalConn) Close() error {
	c.once.Do(func() { c.end(c.scan.result) })
	return c.Conn.Close()
}

// maxScanResult bounds the result frame a frameScan keeps; a real exit result is a
// few dozen bytes.
const maxScanResult = 4 << 10

// frameScan follows a stream of agent frames fed to it in pieces, skipping every frame
// but a Result, which it decodes as the exit result when its checksum holds. It keeps
// at most one small frame, whatever the stream holds.
type frameScan struct {
	hdr    []byte // the frame header read so far
	left   int    // bytes of the current frame still to come: payload and checksum
	keep   []byte // the current frame, when it is a result of bounded size
	broken bool   // a header declared more than a frame may hold: stop following
	result *agentproto.ExitResult
}

const frameHeader = 5 // type and length

// terminalStates are the ends a terminal's result may name; the sandbox wrote it, so
// any other is not recorded.
var terminalStates = []string{agentproto.StateSucceeded, agentproto.StateFailed, agentproto.StateTimeout,
	agentproto.StateCancelled, agentproto.StateKilled}

func (s *frameScan) feed(b []byte) {
	for len(b) > 0 && !s.broken {
		if s.left == 0 {
			k := min(frameHeader-len(s.hdr), len(b))
			s.hdr, b = append(s.hdr, b[:k]...), b[k:]
			if len(s.hdr) < frameHeader {
				return
			}
			n := binary.BigEndian.Uint32(s.hdr[1:])
			if n > agentproto.MaxPayload {
				s.broken = true
				return
			}
			s.left, s.keep = int(n)+4, nil
			if agentproto.FrameType(s.hdr[0]) == agentproto.FrameResult && n <= maxScanResult {
				s.keep = append(make([]byte, 0, frameHeader+s.left), s.hdr...)
			}
			s.hdr = s.hdr[:0]
			continue
		}
		k := min(s.left, len(b))
		if s.keep != nil {
			s.keep = append(s.keep, b[:k]...)
		}
		s.left, b = s.left-k, b[k:]
		if s.left == 0 && s.keep != nil {
			var res agentproto.ExitResult
			if _, p, err := agentproto.ReadFrame(bytes.NewReader(s.keep)); err == nil && json.Unmarshal(p, &res) == nil &&
				slices.Contains(terminalStates, res.State) {
				s.result = &agentproto.ExitResult{State: res.State, ExitCode: res.ExitCode}
			}
			s.keep = nil
		}
	}
}
