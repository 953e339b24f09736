package console

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"golang.org/x/net/websocket"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// termMessage is what the page sends over the terminal's WebSocket (text frames):
// keystrokes, or a new size. The console answers with the terminal's output (binary
// frames) and, at the end, one text frame {"type":"exit","result":…} or
// {"type":"error","error":…}.
type termMessage struct {
	Type string `json:"type"` // "stdin" or "resize"
	Data string `json:"data,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// maxTermMessage bounds one message from the page.
const maxTermMessage = 64 << 10

// terminal bridges a WebSocket from the page to POST /v1/sandboxes/{ref}/pty, the
// API's terminal stream, with the viewer's token. The WebSocket handshake is a GET:
// it needs the session's cookie (SameSite=Strict) and the page's own Origin, which
// browsers always send on a WebSocket.
func (c *Console) terminal(w http.ResponseWriter, r *http.Request) {
	ss, _ := c.sessions.get(r)
	if ss == nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", "the console session is missing or expired: sign in again")
		return
	}
	if r.Header.Get("Origin") == "" || !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "permission_denied", "a terminal opens only from the console's own page")
		return
	}
	q := url.Values{}
	for _, k := range []string{"rows", "cols"} {
		if v := r.URL.Query().Get(k); v != "" {
			if n, err := strconv.ParseUint(v, 10, 16); err != nil || n == 0 {
				writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("invalid %s %q: a number from 1 to 65535", k, v))
				return
			}
			q.Set(k, v)
		}
	}
	target := "http://console/v1/sandboxes/" + url.PathEscape(r.PathValue("ref")) + "/pty?" + q.Encode()
	ws := websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // the origin is checked above
		Handler: func(ws *websocket.Conn) {
			defer ws.Close()
			ws.MaxPayloadBytes = maxTermMessage
			c.bridge(ws, r, ss.token, target)
		},
	}
	ws.ServeHTTP(w, r)
}

// bridge opens the API's terminal and copies between it and ws until either ends.
func (c *Console) bridge(ws *websocket.Conn, r *http.Request, token, target string) {
	fail := func(code, msg string) {
		websocket.JSON.Send(ws, map[string]any{"type": "error", "error": map[string]string{"code": code, "message": msg}})
	}
	ctx := viewerContext(r)
	conn, err := c.pipe.DialContext(ctx, "", "")
	if err != nil {
		fail("unavailable", "the API could not be reached")
		return
	}
	defer conn.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		fail("invalid_argument", err.Error())
		return
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "airlock-pty")
	if err := req.Write(conn); err != nil {
		fail("unavailable", "the API could not be reached")
		return
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		fail("unavailable", "the API could not be reached")
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		var body struct {
			Error struct{ Code, Message string }
		}
		json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
		resp.Body.Close()
		fail(body.Error.Code, body.Error.Message)
		return
	}
	go func() { // the page's keystrokes and sizes to the terminal
		defer conn.Close()
		for {
			var m termMessage
			if err := websocket.JSON.Receive(ws, &m); err != nil {
				return
			}
			var err error
			switch m.Type {
			case "stdin":
				err = agentproto.WriteFrame(conn, agentproto.FrameStdin, []byte(m.Data))
			case "resize":
				if m.Rows == 0 || m.Cols == 0 {
					continue
				}
				b, _ := json.Marshal(agentproto.Resize{Rows: m.Rows, Cols: m.Cols})
				err = agentproto.WriteFrame(conn, agentproto.FrameResize, b)
			}
			if err != nil {
				return
			}
		}
	}()
	for { // the terminal's output to the page
		t, payload, err := agentproto.ReadFrame(br)
		if err != nil {
			fail("unavailable", "the terminal's connection ended")
			return
		}
		switch t {
		case agentproto.FrameStdout, agentproto.FrameStderr:
			if err := websocket.Message.Send(ws, payload); err != nil {
				return
			}
		case agentproto.FrameResult:
			if !json.Valid(payload) {
				fail("internal", "the terminal's result could not be read")
				return
			}
			websocket.Message.Send(ws, `{"type":"exit","result":`+string(payload)+`}`)
			return
		case agentproto.FrameError:
			var re agentproto.RemoteError
			json.Unmarshal(payload, &re)
			fail(re.Code, re.Message)
			return
		}
	}
}
