package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
)

// fakeDaemon implements the API routes the CLI uses, minimally and in memory, on a unix
// socket. Exec understands a few commands: echo ARGS, fail CODE, cat (prints stdin),
// timeout, oom, kill, and hang (streams one line, then waits for the client to go away).
type fakeDaemon struct {
	t    *testing.T
	sock string

	mu         sync.Mutex
	sandboxes  map[string]*api.Sandbox
	files      map[string][]byte // "name:/path"
	modes      map[string]uint32
	images     []api.Image
	checks     []api.Check
	calls      []string // "METHOD /path"
	lastExec   api.ExecRequest
	lastCreate api.CreateSandboxRequest
	lastKey    string // Idempotency-Key of the last mutating call
	hangEnded  chan struct{}
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{
		t:         t,
		sandboxes: map[string]*api.Sandbox{},
		files:     map[string][]byte{},
		modes:     map[string]uint32{},
		images:    []api.Image{{Name: "host", Builtin: true, Digest: "sha256:0123456789abcdef0123"}},
		checks:    []api.Check{{Name: "runc", OK: true, Detail: "runc 1.1.5"}},
		hangEnded: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, api.Status{Version: "1.2.3", StateDir: "/var/lib/airlock", Sandboxes: len(f.sandboxes), Checks: f.checks})
	})
	mux.HandleFunc("POST /v1/sandboxes", f.create)
	mux.HandleFunc("GET /v1/sandboxes", f.list)
	mux.HandleFunc("GET /v1/sandboxes/{ref}", f.withSandbox(func(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
		writeJSON(w, 200, sb)
	}))
	mux.HandleFunc("DELETE /v1/sandboxes/{ref}", f.withSandbox(f.terminate))
	mux.HandleFunc("POST /v1/sandboxes/{ref}/exec", f.withSandbox(f.exec))
	mux.HandleFunc("PUT /v1/sandboxes/{ref}/files", f.withSandbox(f.upload))
	mux.HandleFunc("GET /v1/sandboxes/{ref}/files", f.withSandbox(f.download))
	mux.HandleFunc("GET /v1/sandboxes/{ref}/files/stat", f.withSandbox(f.stat))
	mux.HandleFunc("POST /v1/sandboxes/{ref}/pty", f.withSandbox(f.pty))
	mux.HandleFunc("GET /v1/operations/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "op_1" {
			writeErr(w, 404, "not_found", "operation "+r.PathValue("id")+" not found")
			return
		}
		writeJSON(w, 200, api.Operation{ID: "op_1", Kind: "create", State: "failed", Error: &api.Error{Code: "quota_exceeded", Message: "too many sandboxes"}})
	})
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, api.ImageList{Images: f.images})
	})
	mux.HandleFunc("POST /v1/images", f.importImage)
	mux.HandleFunc("DELETE /v1/images/{ref}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("ref") != "alpine" {
			writeErr(w, 404, "not_found", "image "+r.PathValue("ref")+" not found")
			return
		}
		w.WriteHeader(204)
	})
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			f.lastKey = k
		}
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})

	f.sock = filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := httptest.NewUnstartedServer(logged)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return f
}

// run runs the CLI against the fake with stdin and returns what it printed.
func (f *fakeDaemon) run(ctx context.Context, stdin string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := Run(ctx, append([]string{"--socket", f.sock}, args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func (f *fakeDaemon) addSandbox(name string) *api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := &api.Sandbox{ID: fmt.Sprintf("sb_%d", len(f.sandboxes)+1), Name: name, State: api.StateRunning, Image: "host", Generation: 1, Version: 1}
	f.sandboxes[name] = sb
	return sb
}

func (f *fakeDaemon) sandbox(name string) *api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sandboxes[name]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: api.Error{Code: code, Message: msg}})
}

func (f *fakeDaemon) withSandbox(h func(http.ResponseWriter, *http.Request, *api.Sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb := f.sandbox(r.PathValue("ref"))
		if sb == nil {
			writeErr(w, 404, "not_found", "sandbox "+r.PathValue("ref")+" not found")
			return
		}
		h(w, r, sb)
	}
}

func (f *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_argument", err.Error())
		return
	}
	if f.sandbox(req.Name) != nil {
		writeErr(w, 409, "already_exists", "sandbox "+req.Name+" already exists")
		return
	}
	sb := f.addSandbox(req.Name)
	f.mu.Lock()
	f.lastCreate = req
	sb.Limits, sb.Labels, sb.Env = req.Limits, req.Labels, req.Env
	if req.Image != "" {
		sb.Image = req.Image
	}
	f.mu.Unlock()
	writeJSON(w, 201, api.OperationResponse{Operation: api.Operation{ID: "op_1", Kind: "create", State: "succeeded", SandboxID: sb.ID}, Sandbox: sb})
}

func (f *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	states := r.URL.Query()["state"]
	for _, name := range sortedKeys(f.sandboxes) {
		sb := f.sandboxes[name]
		if len(states) > 0 && !strings.Contains(strings.Join(states, ","), sb.State) {
			continue
		}
		match := true
		for _, l := range r.URL.Query()["label"] {
			k, v, _ := strings.Cut(l, "=")
			match = match && sb.Labels[k] == v
		}
		if match {
			out.Sandboxes = append(out.Sandboxes, *sb)
		}
	}
	writeJSON(w, 200, out)
}

func (f *fakeDaemon) terminate(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := r.Header.Get("If-Match"); m != "" && m != strconv.Quote(strconv.FormatInt(sb.Version, 10)) {
		writeErr(w, 412, "version_conflict", fmt.Sprintf("sandbox %s is at version %d, not %s", sb.Name, sb.Version, m))
		return
	}
	sb.State = api.StateTerminated
	writeJSON(w, 200, api.OperationResponse{Operation: api.Operation{ID: "op_2", Kind: "terminate", State: "succeeded", SandboxID: sb.ID}, Sandbox: sb})
}

func (f *fakeDaemon) exec(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	var req api.ExecRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Argv) == 0 {
		writeErr(w, 400, "invalid_argument", "bad exec request")
		return
	}
	f.mu.Lock()
	f.lastExec = req
	f.mu.Unlock()
	res := &api.ExecResult{State: api.ExecSucceeded}
	var events []api.ExecEvent
	out := func(typ, data string) { events = append(events, api.ExecEvent{Type: typ, Data: data}) }
	switch req.Argv[0] {
	case "echo":
		out("stdout", strings.Join(req.Argv[1:], " ")+"\n")
	case "cat":
		out("stdout", req.Stdin)
	case "fail":
		out("stderr", "oops\n")
		code, _ := strconv.Atoi(req.Argv[1])
		res = &api.ExecResult{State: api.ExecFailed, ExitCode: code}
	case "hostile": // output is the command's own; the error text is the agent's
		out("stdout", "red \x1b[31mtext\n")
		res = &api.ExecResult{State: api.ExecFailed, Error: "gone\x1b]0;pwned\x07 \u009b2J \u202eevil\tend\nline"}
	case "agenterr":
		writeErr(w, 503, "unavailable", "agent says \x1b[2J\x1b]52;c;cGF5bG9hZA==\x07 \u202egnp.exe")
		return
	case "timeout":
		res = &api.ExecResult{State: api.ExecTimeout, ExitCode: -1}
	case "oom":
		res = &api.ExecResult{State: api.ExecOOMKilled, ExitCode: 137}
	case "kill":
		res = &api.ExecResult{State: api.ExecKilled, ExitCode: 143, Signal: "SIGTERM"}
	case "hang":
		w.Header().Set("Content-Type", "application/x-ndjson")
		json.NewEncoder(w).Encode(api.ExecEvent{Type: "stdout", Data: "started\n"})
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(f.hangEnded)
		return
	}
	if !req.Stream {
		for _, ev := range events {
			if ev.Type == "stdout" {
				res.Stdout += ev.Data
			} else {
				res.Stderr += ev.Data
			}
		}
		writeJSON(w, 200, res)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, ev := range append(events, api.ExecEvent{Type: "exit", Result: res}) {
		enc.Encode(ev)
	}
}

func (f *fakeDaemon) upload(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	p := r.URL.Query().Get("path")
	mode, _ := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if mode == 0 {
		mode = 0o644
	}
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.files[sb.Name+":"+p], f.modes[sb.Name+":"+p] = b, uint32(mode)
	f.mu.Unlock()
	writeJSON(w, 201, api.FileInfo{Name: filepath.Base(p), Path: p, Size: int64(len(b)), Mode: uint32(mode)})
}

func (f *fakeDaemon) download(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	f.mu.Lock()
	b, ok := f.files[sb.Name+":"+r.URL.Query().Get("path")]
	f.mu.Unlock()
	if !ok {
		writeErr(w, 404, "not_found", "no such file")
		return
	}
	w.Write(b)
}

func (f *fakeDaemon) stat(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	p := r.URL.Query().Get("path")
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == "/dir" || p == "/" {
		writeJSON(w, 200, api.FileInfo{Name: filepath.Base(p), Path: p, IsDir: true, Mode: 0o755})
		return
	}
	b, ok := f.files[sb.Name+":"+p]
	if !ok {
		writeErr(w, 404, "not_found", p+": no such file")
		return
	}
	writeJSON(w, 200, api.FileInfo{Name: filepath.Base(p), Path: p, Size: int64(len(b)), Mode: f.modes[sb.Name+":"+p]})
}

// pty echoes stdin and, when stdin closes, ends with exit code 3.
func (f *fakeDaemon) pty(w http.ResponseWriter, r *http.Request, sb *api.Sandbox) {
	if r.Header.Get("Upgrade") != "airlock-pty" {
		writeErr(w, 400, "invalid_argument", "want Upgrade: airlock-pty")
		return
	}
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: airlock-pty\r\n\r\n")
	agentproto.WriteFrame(conn, agentproto.FrameStdout, []byte("$ "+strings.Join(r.URL.Query()["cmd"], " ")+"\n"))
	for {
		typ, p, err := agentproto.ReadFrame(brw)
		if err != nil {
			return
		}
		switch typ {
		case agentproto.FrameStdin:
			agentproto.WriteFrame(conn, agentproto.FrameStdout, p)
		case agentproto.FrameStdinClose:
			b, _ := json.Marshal(api.ExecResult{State: api.ExecFailed, ExitCode: 3})
			agentproto.WriteFrame(conn, agentproto.FrameResult, b)
			return
		}
	}
}

func (f *fakeDaemon) importImage(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	name := r.URL.Query().Get("name")
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	if !bytes.HasPrefix(b, []byte("TAR")) {
		enc.Encode(api.ImportEvent{Error: &api.Error{Code: "invalid_argument", Message: "not an image archive"}})
		return
	}
	enc.Encode(api.ImportEvent{Phase: "unpack", Done: int64(len(b)), Total: int64(len(b))})
	img := api.Image{Name: name, Digest: "sha256:abcdef0123456789abcdef", Layers: 1, Size: int64(len(b)), Created: time.Now()}
	f.mu.Lock()
	f.images = append(f.images, img)
	f.mu.Unlock()
	enc.Encode(api.ImportEvent{Image: &img})
}
