package httpedge

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
)

// Recorder notes the status a handler answered with, for the request audit. It passes
// flushes and hijacks through (streams, terminals and upgrades).
type Recorder struct {
	http.ResponseWriter
	status int
}

// Status is the status the answer began with: 200 if the handler wrote nothing.
func (s *Recorder) Status() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

func (s *Recorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *Recorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Flush passes on a flush: streamed answers need it.
func (s *Recorder) Flush() { http.NewResponseController(s.ResponseWriter).Flush() }

// Hijack hands over the connection (upgrades, terminals).
func (s *Recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijacking is not supported")
	}
	if s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return hj.Hijack()
}

// Unwrap lets http.ResponseController reach the connection.
func (s *Recorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Tracker passes writes on to W and notes whether any byte went: once one has, a
// handler's failure can no longer be its answer (it returns Cut(err)).
type Tracker struct {
	W    io.Writer
	Sent bool
}

func (t *Tracker) Write(p []byte) (int, error) {
	t.Sent = true
	return t.W.Write(p)
}

// cutError is a handler's failure after its answer's first byte.
type cutError struct{ err error }

func (c cutError) Error() string { return c.err.Error() }
func (c cutError) Unwrap() error { return c.err }

// Cut marks err as a failure after the answer began: its status is gone, so Run writes
// no error answer, and the caller ends the connection without ending the answer (Abort)
// once it has recorded the request. A client then sees the body end early — never a
// short stream that looks whole, as a chunked tar stream cut between two entries would.
func Cut(err error) error { return cutError{err} }

// Abort ends the connection of a request whose handler failed with Cut, without the
// answer's end; any other err returns.
func Abort(err error) {
	if errors.As(err, new(cutError)) {
		panic(http.ErrAbortHandler)
	}
}
