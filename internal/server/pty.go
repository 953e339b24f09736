package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// ptyProtocol is the Upgrade token of an interactive terminal.
const ptyProtocol = "airlock-pty"

// defaultShell starts a login shell, bash where the image has it.
var defaultShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"}

// pty upgrades the connection and splices it to a PTY call on the sandbox's agent. The
// agent's checksummed frames pass through unchanged, so the client verifies them end to
// end.
func (s *Server) pty(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), ptyProtocol) ||
		!strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
		return errdefs.Invalid("a terminal needs the headers Connection: Upgrade and Upgrade: %s", ptyProtocol)
	}
	q := r.URL.Query()
	spec := agentproto.ExecSpec{Argv: q["cmd"], Rows: 24, Cols: 80, Env: []string{"TERM=xterm-256color"}}
	if len(spec.Argv) == 0 {
		spec.Argv = defaultShell
	}
	for _, p := range []struct {
		name string
		dst  *uint16
	}{{"rows", &spec.Rows}, {"cols", &spec.Cols}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return errdefs.Invalid("invalid %s %q: a number from 1 to 65535", p.name, v)
			}
			*p.dst = uint16(n)
		}
	}
	if t := q.Get("term"); t != "" {
		spec.Env = []string{"TERM=" + t}
	}
	ac, err := s.m.OpenTerminal(r.Context(), s.scope(r), r.PathValue("ref"), spec)
	if err != nil {
		return err
	}
	defer ac.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		return errdefs.Unavailable("this connection cannot be upgraded")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ptyProtocol + "\r\n\r\n")
	rw.Flush()
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(ac, rw) // client frames (buffered ones first) to the agent
		done <- struct{}{}
	}()
	go func() {
		io.Copy(conn, ac)
		done <- struct{}{}
	}()
	<-done
	return nil
}
