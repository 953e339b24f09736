package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/klauspost/compress/zstd"
)

// leakHandler answers with the Authorization it got (the value, after substitution)
// in the ways an upstream may hand a request back:
//
//	/leak/header   in a response header
//	/leak/split    in the body, written in two flushed halves
//	/leak/gzip     in a gzip body (also /leak/deflate, /leak/zstd)
//	/leak/br       in a body that claims Content-Encoding br
//	/leak/early    in a 103 Early Hints header, before the answer
//	/leak/trailer  in a trailer
//	/leak/upgrade  after a 101 Switching Protocols, on the switched connection
//	/leak/stored   ghValue, as a stored credential shown back, whatever was sent
func leakHandler(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	rc := http.NewResponseController(w)
	compressed := func(encoding string, wc io.WriteCloser, buf *bytes.Buffer) {
		io.WriteString(wc, "auth="+auth+"\n")
		wc.Close()
		w.Header().Set("Content-Encoding", encoding)
		w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
		w.Write(buf.Bytes())
	}
	var buf bytes.Buffer
	switch r.URL.Path {
	case "/leak/header":
		w.Header().Set("X-Echo-Auth", auth)
		io.WriteString(w, "ok\n")
	case "/leak/split":
		half := len(auth) / 2
		io.WriteString(w, "auth="+auth[:half])
		rc.Flush()
		time.Sleep(20 * time.Millisecond) // a read of its own at the proxy
		io.WriteString(w, auth[half:]+"\n")
	case "/leak/gzip":
		compressed("gzip", gzip.NewWriter(&buf), &buf)
	case "/leak/deflate":
		compressed("deflate", zlib.NewWriter(&buf), &buf)
	case "/leak/zstd":
		z, _ := zstd.NewWriter(&buf)
		compressed("zstd", z, &buf)
	case "/leak/br":
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, "auth="+auth+"\n") // not brotli; the proxy must not pass it on
	case "/leak/early":
		w.Header().Set("Link", "</style.css?auth="+auth+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok\n")
	case "/leak/trailer":
		w.Header().Set("Trailer", "X-Echo-Auth")
		io.WriteString(w, "ok\n")
		w.Header().Set("X-Echo-Auth", auth)
	case "/leak/upgrade":
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := rc.Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("auth=" + auth + "\n")
		brw.Flush()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		brw.ReadString('\n') // until the client is done
	case "/leak/stored":
		io.WriteString(w, "your key: "+ghValue+"\n")
	}
}

// TestRedactedAnswers: whatever way an upstream hands the value back to the sandbox,
// the sandbox gets it starred out, as long as the value was.
func TestRedactedAnswers(t *testing.T) {
	e := newSecretEnv(t, Policy{Mode: ModeBaseline, AllowPrivate: loopback8})
	c := e.client("127.0.0.1", false)
	stars := strings.Repeat("*", len(ghValue))
	for _, tt := range []struct {
		path   string
		want   int
		header string // the header that must hold the starred value, if any
	}{
		{"/leak/header", 200, "X-Echo-Auth"},
		{"/leak/split", 200, ""},
		{"/leak/gzip", 200, ""},
		{"/leak/deflate", 200, ""},
		{"/leak/zstd", 200, ""},
		{"/leak/br", http.StatusBadGateway, ""},
		{"/leak/early", 200, ""},
		{"/leak/trailer", 200, ""},
		{"/leak/stored", 200, ""},
	} {
		req, _ := http.NewRequest("GET", "https://api.example.com"+tt.path, nil)
		if tt.path != "/leak/stored" {
			req.Header.Set("Authorization", "Bearer "+ghPlaceholder)
		}
		var early []string
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				early = append(early, fmt.Sprint(code, h))
				return nil
			},
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tt.path, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := fmt.Sprint(resp.Status, resp.Header, string(body), resp.Trailer, early)
		switch {
		case err != nil:
			t.Errorf("%s: reading the body: %v", tt.path, err)
		case resp.StatusCode != tt.want:
			t.Errorf("%s = %d (%s), want %d", tt.path, resp.StatusCode, body, tt.want)
		case strings.Contains(got, ghValue) || strings.Contains(got, base64.StdEncoding.EncodeToString([]byte(ghValue))):
			t.Errorf("%s: the sandbox got the value back: %s", tt.path, got)
		case tt.want == 200 && !strings.Contains(got, stars):
			t.Errorf("%s: no starred value in what the sandbox got: %s", tt.path, got)
		case tt.header != "" && !strings.Contains(resp.Header.Get(tt.header), stars):
			t.Errorf("%s: header %s = %q, want the value starred", tt.path, tt.header, resp.Header.Get(tt.header))
		case resp.Header.Get("Content-Encoding") != "":
			t.Errorf("%s: Content-Encoding %q reached the sandbox, want the body decoded", tt.path, resp.Header.Get("Content-Encoding"))
		}
	}

	// The switched protocol of a 101 is redacted as it streams.
	tc := e.tlsTunnel(t, "api.example.com")
	fmt.Fprintf(tc, "GET /leak/upgrade HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", ghPlaceholder)
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	line, err := br.ReadString('\n')
	if err != nil || strings.Contains(line, ghValue) || !strings.Contains(line, stars) {
		t.Errorf("upgraded connection: the sandbox read %q (%v), want the value starred", line, err)
	}
	io.WriteString(tc, "bye\n")

	// The request to a secret's host asks for no range, and for no encoding the proxy
	// cannot decode.
	send(t, c, "GET", "https://api.example.com/echo", "Range", "bytes=0-3", "If-Range", `"x"`,
		"Accept-Encoding", "br;q=1.0, gzip;q=0.5, zstd", "Sec-WebSocket-Extensions", "permessage-deflate")
	seen := e.lastEcho()
	for _, no := range []string{"Range:", "If-Range:", "Sec-Websocket-Extensions:", "br"} {
		if strings.Contains(seen, no) {
			t.Errorf("the upstream got %q:\n%s", no, seen)
		}
	}
	if !strings.Contains(seen, "Accept-Encoding: gzip;q=0.5, zstd\n") {
		t.Errorf("the upstream got\n%s\nwant Accept-Encoding: gzip;q=0.5, zstd", seen)
	}
}

// TestRedactStream: a form is found however the stream is cut, the longer of two that
// start at one place wins, lengths stay as they were, and bytes that cannot start a
// form are not held back waiting for more.
func TestRedactStream(t *testing.T) {
	const value = "sk-Secret+Value/42"
	r := newRedactor(append(redactForms(value), "dXNlcjpzay1TZWNyZXQrVmFsdWUvNDI="))
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct{ in, want string }{
		{"a " + value + " b", "a " + strings.Repeat("*", len(value)) + " b"},
		{value + value, strings.Repeat("*", 2*len(value))},
		{"sk-Secret+Value/4", "sk-Secret+Value/4"}, // short of a whole value
		{"sk-sk-Secret+Value/42!", "sk-" + strings.Repeat("*", len(value)) + "!"},
		{`{"k":"sk-Secret+Value\/42"}`, `{"k":"sk-Secret+Value\/42"}`}, // an escape Go's JSON does not make
		{"q=sk-Secret%2BValue%2F42&", "q=" + strings.Repeat("*", len("sk-Secret%2BValue%2F42")) + "&"},
		{"Basic dXNlcjpzay1TZWNyZXQrVmFsdWUvNDI=", "Basic " + strings.Repeat("*", 32)},
		{"x" + b64([]byte("ab"+value+"c")) + "x", ""}, // checked below: no run of the value's base64 left
	}
	for _, tt := range tests {
		for _, cut := range []string{"whole", "bytes", "random"} {
			var src io.Reader = strings.NewReader(tt.in)
			switch cut {
			case "bytes":
				src = iotest.OneByteReader(src)
			case "random":
				src = &randomReads{r: src}
			}
			out, err := io.ReadAll(&redactBody{src: src, r: r})
			if err != nil {
				t.Fatalf("%q (%s): %v", tt.in, cut, err)
			}
			if len(out) != len(tt.in) {
				t.Errorf("%q (%s) became %q: %d bytes, want %d", tt.in, cut, out, len(out), len(tt.in))
			}
			if tt.want == "" {
				if s := string(out); strings.Contains(s, b64([]byte(value[1:16]))) || strings.Count(s, "*") < 16 {
					t.Errorf("%q (%s) became %q, want the value's base64 starred", tt.in, cut, out)
				}
			} else if string(out) != tt.want {
				t.Errorf("%q (%s) became %q, want %q", tt.in, cut, out, tt.want)
			}
		}
	}

	// Nothing that cannot start a form waits for the next read: an event stream's
	// event reaches the sandbox as soon as it came.
	pr, pw := io.Pipe()
	body := &redactBody{src: pr, r: r}
	go pw.Write([]byte("data: one\n\n"))
	got := make([]byte, 64)
	done := make(chan int, 1)
	go func() { n, _ := body.Read(got); done <- n }()
	select {
	case n := <-done:
		if string(got[:n]) != "data: one\n\n" {
			t.Errorf("first read = %q, want the whole event", got[:n])
		}
	case <-time.After(5 * time.Second):
		t.Errorf("an event that cannot hold the value was held back")
	}
	pw.Close()
}

// randomReads returns what r has in reads of random sizes.
type randomReads struct{ r io.Reader }

func (s *randomReads) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), 1+rand.IntN(7))])
}

// BenchmarkRedact: the cost of redacting a body from a secret's host, per byte.
func BenchmarkRedact(b *testing.B) {
	r := redactorFor([]openSecret{{value: ghValue}, {value: qValue}}, nil)
	data := bytes.Repeat([]byte("0123456789abcdef ghp_ x "), 4<<10)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		io.Copy(io.Discard, &redactBody{src: bytes.NewReader(data), r: r})
	}
}
