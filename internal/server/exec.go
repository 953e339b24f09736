package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	mreq := manager.ExecRequest{
		Argv: req.Argv, Shell: req.Shell, Env: req.Env, Cwd: req.Cwd, UID: req.UID, GID: req.GID, Timeout: req.Timeout,
	}
	if req.Stdin != "" {
		mreq.Stdin = strings.NewReader(req.Stdin)
	}
	ref := r.PathValue("ref")
	if req.Stream {
		st := newStream(w)
		res, err := s.m.Exec(r.Context(), s.scope(r), ref, mreq, st.writer("stdout"), st.writer("stderr"))
		return st.finish(s, r, toAPIResult(res), err)
	}
	stdout, stderr := s.collectors()
	defer stdout.release()
	defer stderr.release()
	mreq.MaxRead = s.maxRead()
	audit.Holding(r.Context()) // nothing is answered before the end: one write with the request's record
	res, err := s.m.Exec(r.Context(), s.scope(r), ref, mreq, stdout, stderr)
	if err != nil {
		return err
	}
	out := toAPIResult(res)
	setOutput(out, stdout, stderr)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// collectors are the buffers of one non-streamed call's stdout and stderr.
func (s *Server) collectors() (stdout, stderr *collector) {
	return newCollector(s.opts.OutputLimit, s.outBudget), newCollector(s.opts.OutputLimit, s.outBudget)
}

// maxRead is how much a non-streamed call reads from the sandbox before it stops the
// command: enough to see the result of a command that writes a few times what is kept.
func (s *Server) maxRead() int64 { return readFactor * s.opts.OutputLimit }

func toAPIResult(res *agentproto.ExitResult) *api.ExecResult {
	if res == nil {
		return nil
	}
	return &api.ExecResult{State: res.State, ExitCode: res.ExitCode, Signal: res.Signal, DurationMS: res.DurationMS, Error: res.Error}
}

// stream writes NDJSON ExecEvents, one per output line as it is produced.
type stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	enc     *json.Encoder
	flusher http.Flusher
	started bool
	writers []*lineWriter
}

func newStream(w http.ResponseWriter) *stream {
	f, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &stream{w: w, enc: enc, flusher: f}
}

func (st *stream) emit(ev api.ExecEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started {
		st.w.Header().Set("Content-Type", "application/x-ndjson")
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	st.enc.Encode(ev)
	if st.flusher != nil {
		st.flusher.Flush()
	}
}

func (st *stream) writer(typ string) *lineWriter {
	lw := &lineWriter{st: st, typ: typ}
	st.writers = append(st.writers, lw)
	return lw
}

// finish flushes partial lines and writes the closing event. An error before anything
// was streamed is returned, for an ordinary error response.
func (st *stream) finish(s *Server, r *http.Request, res *api.ExecResult, err error) error {
	for _, lw := range st.writers {
		lw.flush()
	}
	if err != nil {
		st.mu.Lock()
		started := st.started
		st.mu.Unlock()
		if !started {
			return err
		}
		_, e := s.apiError(r, err)
		st.emit(api.ExecEvent{Type: "error", Error: &e})
		return nil
	}
	st.emit(api.ExecEvent{Type: "exit", Result: res})
	return nil
}

type lineWriter struct {
	st  *stream
	typ string
	buf []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			break
		}
		lw.st.emit(chunkEvent(lw.typ, lw.buf[:i+1]))
		lw.buf = lw.buf[i+1:]
	}
	// A very long line without a newline goes out in pieces rather than growing forever.
	if len(lw.buf) >= 64<<10 {
		lw.flush()
	}
	return len(p), nil
}

func (lw *lineWriter) flush() {
	if len(lw.buf) > 0 {
		lw.st.emit(chunkEvent(lw.typ, lw.buf))
		lw.buf = nil
	}
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request) error {
	var req api.SessionRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	switch req.Kind {
	case agentproto.SessionPython, agentproto.SessionShell:
		if req.Background {
			return errdefs.Invalid("a %s session takes input; only a raw session runs in the background", req.Kind)
		}
	case agentproto.SessionRaw:
		if len(req.Argv) == 0 {
			return errdefs.Invalid("a raw session needs argv")
		}
	default:
		return errdefs.Invalid("unknown session kind %q; kinds are python, shell and raw", req.Kind)
	}
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	info, err := s.m.StartSession(r.Context(), s.scope(r), r.PathValue("ref"),
		agentproto.SessionSpec{Kind: req.Kind, Argv: req.Argv, Env: env, Cwd: req.Cwd, Log: req.Background})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiSession(*info))
	return nil
}

func apiSession(i agentproto.SessionInfo) api.Session {
	s := api.Session{ID: i.ID, Kind: i.Kind, PID: i.PID, Background: i.Log, Exited: i.Exited, ExitCode: i.ExitCode}
	if i.StartedMS > 0 {
		t := time.UnixMilli(i.StartedMS).UTC()
		s.Started = &t
	}
	return s
}

// sessionLogs streams a background session's log: its last ?tail lines (all it keeps
// when 0 or absent) and, with ?follow=true, what comes after until the process ends.
// The result event says whether it is running or exited, and its exit code.
func (s *Server) sessionLogs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	tail := 0
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errdefs.Invalid("tail %q must be a number of lines, 0 or more", v)
		}
		tail = n
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errdefs.Invalid("follow %q must be true or false", v)
		}
		follow = b
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	st := newStream(w)
	res, err := wk.SessionLogs(r.Context(), r.PathValue("sid"), tail, follow, st.writer("stdout"), st.writer("stderr"))
	var out *api.ExecResult
	if res != nil {
		out = &api.ExecResult{State: res.State, ExitCode: res.ExitCode}
	}
	return st.finish(s, r, out, err)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	list, err := wk.ListSessions(r.Context())
	if err != nil {
		return err
	}
	out := api.SessionList{Sessions: []api.Session{}}
	for _, i := range list {
		out.Sessions = append(out.Sessions, apiSession(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) error {
	var req api.SendRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	sid := r.PathValue("sid")
	if req.Stream {
		st := newStream(w)
		res, err := wk.Send(r.Context(), sid, req.Input, 0, st.writer("stdout"), st.writer("stderr"))
		return st.finish(s, r, sendResult(res), err)
	}
	stdout, stderr := s.collectors()
	defer stdout.release()
	defer stderr.release()
	res, err := wk.Send(r.Context(), sid, req.Input, s.maxRead(), stdout, stderr)
	if err != nil {
		return err
	}
	out := sendResult(res)
	setOutput(out, stdout, stderr)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func sendResult(res *agentproto.SendResult) *api.ExecResult {
	if res == nil {
		return nil
	}
	return &api.ExecResult{State: res.State, ExitCode: res.ExitCode, Error: res.Error}
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) error {
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if err := wk.CloseSession(r.Context(), r.PathValue("sid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func chunkEvent(typ string, b []byte) api.ExecEvent {
	if utf8.Valid(b) {
		return api.ExecEvent{Type: typ, Data: string(b)}
	}
	return api.ExecEvent{Type: typ, Bytes: append([]byte(nil), b...)}
}
