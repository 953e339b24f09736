package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// serveUnix serves h on a unix socket in a temporary directory and returns a client for it.
func serveUnix(t *testing.T, h http.Handler) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(Options{Socket: sock})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestUnixSocketDial(t *testing.T) {
	var gotHost, gotPath string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost, gotPath = r.Host, r.URL.EscapedPath()
		writeJSON(w, 200, api.Sandbox{ID: "sb_1", Name: "box one", State: api.StateRunning})
	}))
	sb, err := c.Get(context.Background(), "box one")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if sb.ID != "sb_1" || sb.State != api.StateRunning {
		t.Errorf("Get = %+v, want sb_1 running", sb)
	}
	if gotHost != "airlock" {
		t.Errorf("host = %q, want airlock", gotHost)
	}
	if want := "/v1/sandboxes/box%20one"; gotPath != want {
		t.Errorf("path = %q, want %q", gotPath, want)
	}
}

func TestNewOptions(t *testing.T) {
	t.Setenv("AIRLOCK_SOCKET", "/env/sock")
	tests := []struct {
		name    string
		opts    Options
		target  string
		base    string
		wantErr bool
	}{
		{"env socket", Options{}, "/env/sock", "http://airlock", false},
		{"explicit socket", Options{Socket: "/x.sock"}, "/x.sock", "http://airlock", false},
		{"tcp", Options{Addr: "127.0.0.1:8080"}, "127.0.0.1:8080", "http://127.0.0.1:8080", false},
		{"tcp with scheme", Options{Addr: "http://h:1"}, "h:1", "http://h:1", false},
		{"bad addr", Options{Addr: "nohost"}, "", "", true},
		{"https", Options{Addr: "https://h:1"}, "h:1", "https://h:1", false},
		{"https with a CA file that is not there", Options{Addr: "https://h:1", CAFile: "/nonexistent/ca.pem"}, "", "", true},
		{"ftp", Options{Addr: "ftp://h:1"}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("New err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.Target() != tt.target || c.base != tt.base {
				t.Errorf("target, base = %q, %q; want %q, %q", c.Target(), c.base, tt.target, tt.base)
			}
		})
	}
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    Error
		wantIs  error
		wantMsg string
	}{
		{
			name:   "api error",
			status: 404,
			body:   `{"error":{"code":"not_found","message":"sandbox x not found","details":{"ref":"x"}}}`,
			want:   Error{Status: 404, Code: "not_found", Message: "sandbox x not found", Details: map[string]any{"ref": "x"}},
			wantIs: errdefs.ErrNotFound, wantMsg: "sandbox x not found (not_found)",
		},
		{
			name:   "version conflict",
			status: 412,
			body:   `{"error":{"code":"version_conflict","message":"stale"}}`,
			want:   Error{Status: 412, Code: "version_conflict", Message: "stale"},
			wantIs: errdefs.ErrVersionConflict, wantMsg: "stale (version_conflict)",
		},
		{
			name:   "unknown code is internal",
			status: 500,
			body:   `{"error":{"code":"brand_new","message":"m"}}`,
			want:   Error{Status: 500, Code: "brand_new", Message: "m"},
			wantIs: errdefs.ErrInternal, wantMsg: "m (brand_new)",
		},
		{
			name:   "plain text from a proxy",
			status: 502,
			body:   "bad gateway\n",
			want:   Error{Status: 502, Code: "unavailable", Message: "bad gateway"},
			wantIs: errdefs.ErrUnavailable, wantMsg: "bad gateway (unavailable)",
		},
		{
			name:   "empty body",
			status: 403,
			want:   Error{Status: 403, Code: "permission_denied", Message: "Forbidden"},
			wantIs: errdefs.ErrPermissionDenied, wantMsg: "Forbidden (permission_denied)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			_, err := c.Status(context.Background())
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("error = %+v, want %+v", *got, tt.want)
			}
			if !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(err, %v) = false", tt.wantIs)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.wantMsg)
			}
		})
	}
	if !IsNotFound(&Error{Code: "not_found"}) || IsNotFound(&Error{Code: "internal"}) {
		t.Error("IsNotFound does not follow the code")
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "none.sock")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(context.Background())
	if !IsUnavailable(err) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("err = %q, want it to name the socket", err)
	}
}

func TestCallHeaders(t *testing.T) {
	type seen struct{ method, key, ifMatch, auth, contentType string }
	var got []seen
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, seen{r.Method, r.Header.Get("Idempotency-Key"), r.Header.Get("If-Match"), r.Header.Get("Authorization"), r.Header.Get("Content-Type")})
		status := 200
		if r.Method == http.MethodPost {
			var req api.CreateSandboxRequest
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil || req.Name != "a" {
				writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "invalid_argument", Message: "bad body"}})
				return
			}
			status = 201
		}
		writeJSON(w, status, api.OperationResponse{Operation: api.Operation{ID: "op_1", State: "succeeded"}})
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := New(Options{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	op, err := c.Create(ctx, api.CreateSandboxRequest{Name: "a"}, WithIdempotencyKey("k1"))
	if err != nil || op.Operation.ID != "op_1" {
		t.Fatalf("Create = %+v, %v", op, err)
	}
	if _, err := c.Terminate(ctx, "a", WithIfMatch(7), WithIdempotencyKey("k2")); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if _, err := c.Terminate(ctx, "a"); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	want := []seen{
		{"POST", "k1", "", "Bearer tok", "application/json"},
		{"DELETE", "k2", `"7"`, "Bearer tok", ""},
		{"DELETE", "", "", "Bearer tok", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests =\n%+v\nwant\n%+v", got, want)
	}
}

func TestListQuery(t *testing.T) {
	var gotQuery string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{Name: "a"}, {Name: "b"}}})
	}))
	got, err := c.List(context.Background(), ListOptions{States: []string{"running", "suspended"}, Labels: map[string]string{"team": "x", "app": "y=z"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Name != "b" {
		t.Errorf("List = %+v, want a, b", got)
	}
	if want := "label=app%3Dy%3Dz&label=team%3Dx&limit=1000&state=running&state=suspended"; gotQuery != want {
		t.Errorf("query = %q, want %q", gotQuery, want)
	}
}

// List follows next from page to page and returns every page's sandboxes in order.
func TestListFollowsPages(t *testing.T) {
	var queries []string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		switch r.URL.Query().Get("after") {
		case "":
			writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{Name: "a"}, {Name: "b"}}, Next: "c1"})
		case "c1":
			writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{Name: "c"}, {Name: "d"}}, Next: "c2"})
		default:
			writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{Name: "e"}}})
		}
	}))
	got, err := c.List(context.Background(), ListOptions{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sb := range got {
		names = append(names, sb.Name)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !reflect.DeepEqual(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	if want := []string{"limit=2", "after=c1&limit=2", "after=c2&limit=2"}; !reflect.DeepEqual(queries, want) {
		t.Errorf("queries = %q, want %q", queries, want)
	}
}

func TestUploadDownload(t *testing.T) {
	files := map[string][]byte{}
	var gotMode string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		switch r.Method {
		case http.MethodPut:
			gotMode = r.URL.Query().Get("mode")
			b, _ := io.ReadAll(r.Body)
			files[p] = b
			writeJSON(w, 201, api.FileInfo{Name: filepath.Base(p), Path: p, Size: int64(len(b))})
		case http.MethodGet:
			b, ok := files[p]
			if !ok {
				writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: p + " not found"}})
				return
			}
			w.Write(b)
		}
	}))
	ctx := context.Background()
	fi, err := c.Upload(ctx, "box", "/a/b.sh", os.ModeSetuid|0o755, strings.NewReader("#!/bin/sh\n"))
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if fi.Size != 10 || gotMode != "04755" {
		t.Errorf("Upload: size %d mode %q, want 10 04755", fi.Size, gotMode)
	}
	var buf bytes.Buffer
	n, err := c.Download(ctx, "box", "/a/b.sh", &buf)
	if err != nil || n != 10 || buf.String() != "#!/bin/sh\n" {
		t.Errorf("Download = %d %q %v", n, buf.String(), err)
	}
	if _, err := c.Download(ctx, "box", "/nope", &buf); !IsNotFound(err) {
		t.Errorf("Download of a missing file: err = %v, want not_found", err)
	}
	// This server ignores Range, as a daemon without ranges would: the part is cut from
	// the whole file.
	for _, part := range []struct {
		off, n int64
		want   string
	}{{2, 3, "/bi"}, {8, 0, "h\n"}, {0, 100, "#!/bin/sh\n"}, {20, 0, ""}} {
		buf.Reset()
		n, size, err := c.DownloadRange(ctx, "box", "/a/b.sh", part.off, part.n, &buf)
		if err != nil || buf.String() != part.want || n != int64(len(part.want)) || size != -1 {
			t.Errorf("DownloadRange(%d, %d) = %d %q (size %d) %v, want %q", part.off, part.n, n, buf.String(), size, err, part.want)
		}
	}
}

func TestImportImageProgress(t *testing.T) {
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("name") != "alpine" || len(b) != 5 || r.ContentLength != 5 {
			writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "invalid_argument", Message: "bad import"}})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(api.ImportEvent{Phase: "unpack", Done: 1, Total: 2})
		enc.Encode(api.ImportEvent{Phase: "unpack", Done: 2, Total: 2})
		enc.Encode(api.ImportEvent{Image: &api.Image{Name: "alpine", Digest: "sha256:ab"}})
	}))
	var events []api.ImportEvent
	img, err := c.ImportImage(context.Background(), "alpine", strings.NewReader("12345"), 5, func(ev api.ImportEvent) {
		events = append(events, ev)
	})
	if err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	if img.Digest != "sha256:ab" {
		t.Errorf("image = %+v", img)
	}
	last := events[len(events)-1]
	if last.Phase != "unpack" || last.Done != 2 {
		t.Errorf("last event = %+v, want unpack 2/2", last)
	}
	var uploaded int64
	for _, ev := range events {
		if ev.Phase == "upload" {
			uploaded = ev.Done
			if ev.Total != 5 {
				t.Errorf("upload event total = %d, want 5", ev.Total)
			}
		}
	}
	if uploaded != 5 {
		t.Errorf("upload progress reached %d bytes, want 5", uploaded)
	}
}

func TestImportImageErrorEvent(t *testing.T) {
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(api.ImportEvent{Error: &api.Error{Code: "invalid_argument", Message: "not an archive"}})
	}))
	_, err := c.ImportImage(context.Background(), "x", strings.NewReader("zz"), -1, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != "invalid_argument" || e.Status != 400 {
		t.Fatalf("err = %#v, want invalid_argument with status 400", err)
	}
}

// Inside a sandbox, a client with no socket or address reaches the API named by
// $AIRLOCK_API with the session credential's placeholder from its file.
func TestNewInsideASandbox(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		json.NewEncoder(w).Encode(api.WhoAmI{User: "local", Sandbox: "sb_1"})
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("al_session_placeholder\n"), 0o444)
	t.Setenv("AIRLOCK_SOCKET", "")
	t.Setenv("AIRLOCK_API", srv.URL)
	t.Setenv("AIRLOCK_SESSION_TOKEN_FILE", tokenFile)
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	who, err := c.WhoAmI(context.Background())
	if err != nil || who.Sandbox != "sb_1" || gotAuth != "Bearer al_session_placeholder" {
		t.Fatalf("WhoAmI = %+v, %v; Authorization %q", who, err, gotAuth)
	}
	// An explicit socket still wins.
	if c, _ := New(Options{Socket: "/x.sock"}); c.Target() != "/x.sock" {
		t.Errorf("an explicit socket inside a sandbox: target %q", c.Target())
	}
	// http://airlock.internal has no port: 80.
	t.Setenv("AIRLOCK_API", "http://airlock.internal")
	if c, _ := New(Options{}); c.Target() != "airlock.internal:80" {
		t.Errorf("target %q, want airlock.internal:80", c.Target())
	}
}

// TestMinSandboxJSON checks that minSandboxJSON is no longer than the shortest record a
// list can hold, the empty one as the daemon encodes it: a longer one would reserve too
// few records for a page.
func TestMinSandboxJSON(t *testing.T) {
	b, err := json.Marshal(api.Sandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if minSandboxJSON > len(b) {
		t.Fatalf("minSandboxJSON is %d, longer than the empty record's %d bytes: %s", minSandboxJSON, len(b), b)
	}
	if minSandboxJSON < len(b)/2 {
		t.Fatalf("minSandboxJSON is %d, under half the empty record's %d bytes: set it to %d", minSandboxJSON, len(b), len(b))
	}
}
