package agent

import (
	"net"
	"slices"
	"sync"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// A background session (SessionSpec.Log) keeps its output in a sessionLog instead of
// handing it to sends: the last logMax bytes of stdout and stderr, in the order they
// came. session.logs reads the tail of it and, when asked, follows it until the process
// ends. The log lives in the agent, inside the sandbox: what it holds counts against
// the sandbox's own memory, and a chatty process only pushes out its older lines.
const (
	logMax = 1 << 20
	// keptLogs is how many ended background sessions stay readable.
	keptLogs = 16
)

type logChunk struct {
	t agentproto.FrameType
	b []byte
}

type sessionLog struct {
	mu      sync.Mutex
	chunks  []logChunk
	size    int64
	dropped int64 // bytes pushed out of the front
	first   int64 // the sequence number of chunks[0]
	closed  bool  // the process ended and its output is all in
	wake    chan struct{}
}

func newSessionLog() *sessionLog { return &sessionLog{wake: make(chan struct{})} }

// add appends b, dropping the oldest chunks past logMax, and wakes followers.
func (l *sessionLog) add(t agentproto.FrameType, b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = append(l.chunks, logChunk{t, b})
	l.size += int64(len(b))
	for l.size > logMax && len(l.chunks) > 1 {
		l.size -= int64(len(l.chunks[0].b))
		l.dropped += int64(len(l.chunks[0].b))
		l.chunks[0] = logChunk{}
		l.chunks = l.chunks[1:]
		l.first++
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// close marks the log complete.
func (l *sessionLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
		l.wake = make(chan struct{})
	}
}

// since returns the chunks from sequence number seq on (from the oldest kept, if seq
// was pushed out), the next sequence number, whether the log is complete, and a
// channel closed at the next change.
func (l *sessionLog) since(seq int64) ([]logChunk, int64, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq = max(seq, l.first)
	out := slices.Clone(l.chunks[seq-l.first:])
	return out, l.first + int64(len(l.chunks)), l.closed, l.wake
}

// tail returns the sequence number where the last n lines begin, and the part of that
// chunk to skip; n <= 0 means everything kept.
func (l *sessionLog) tail(n int) (seq int64, skip int, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 || len(l.chunks) == 0 {
		return l.first, 0, l.dropped
	}
	lines := 0
	for i := len(l.chunks) - 1; i >= 0; i-- {
		b := l.chunks[i].b
		end := len(b)
		if i == len(l.chunks)-1 && end > 0 && b[end-1] == '\n' {
			end-- // the newline that ends the last line starts no line
		}
		for j := end - 1; j >= 0; j-- {
			if b[j] == '\n' {
				if lines++; lines == n {
					return l.first + int64(i), j + 1, 0
				}
			}
		}
	}
	return l.first, 0, l.dropped
}

// handleSessionLogs sends the tail of a background session's log and, with Follow,
// what it writes after, until the process ends or the caller goes away.
func (s *server) handleSessionLogs(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	ss, err := s.logSession(req.SessionID)
	if err != nil {
		return err
	}
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	defer func() { c.Close(); <-ctl.done }()
	seq, skip, dropped := ss.log.tail(req.Tail)
	for {
		chunks, next, closed, wake := ss.log.since(seq)
		for i, ch := range chunks {
			b := ch.b
			if i == 0 && skip > 0 && skip <= len(b) {
				b = b[skip:]
			}
			if len(b) > 0 {
				if err := fw.frame(ch.t, b); err != nil {
					return nil // the caller went away
				}
			}
		}
		skip, seq = 0, next
		if !req.Follow || closed {
			break
		}
		select {
		case <-wake:
		case <-ctl.cancel:
			return nil
		case <-ctl.done:
			return nil
		}
	}
	res := &agentproto.LogsResult{State: "running", Dropped: dropped}
	if info := ss.infoNow(); info.Exited {
		res.State, res.ExitCode = agentproto.StateExited, info.ExitCode
	}
	return reply(fw, ctl, res)
}

// logSession finds a background session, running or ended.
func (s *server) logSession(id string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		ss, ok = s.endedLogs[id]
	}
	if !ok {
		return nil, errdefs.NotFound("session %q not found", id)
	}
	if ss.log == nil {
		return nil, errdefs.Invalid("session %q is not a background session: its output goes to its sends", id)
	}
	return ss, nil
}

// keepEndedLog keeps an ended background session readable, forgetting the oldest past
// keptLogs. The caller holds s.mu.
func (s *server) keepEndedLog(ss *session) {
	if s.endedLogs == nil {
		s.endedLogs = map[string]*session{}
	}
	s.endedLogs[ss.info.ID] = ss
	s.endedOrder = append(s.endedOrder, ss.info.ID)
	for len(s.endedOrder) > keptLogs {
		delete(s.endedLogs, s.endedOrder[0])
		s.endedOrder = s.endedOrder[1:]
	}
}

// infoNow is the session's info with how it ended, once it has.
func (ss *session) infoNow() agentproto.SessionInfo {
	info := ss.info
	if ss.ended() {
		info.Exited = true
		if ws := ss.p.ws; ws.Signaled() {
			info.ExitCode = 128 + int(ws.Signal())
		} else {
			info.ExitCode = ws.ExitStatus()
		}
	}
	return info
}
