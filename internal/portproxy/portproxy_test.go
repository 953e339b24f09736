package portproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a port's server: it echoes the headers it got and, on /hold, upgrades
// the connection and keeps it open until the client goes.
func upstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "test")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			rw.WriteString("hello\n")
			rw.Flush()
			io.Copy(io.Discard, c)
			return
		}
		io.WriteString(w, "secret="+r.Header.Get("X-Secret")+" keep="+r.Header.Get("X-Keep")+" host="+r.Host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestServeStripsTouchesAndCuts(t *testing.T) {
	addr := upstream(t)
	p := New()
	var touched atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Serve(w, r, Target{SandboxID: "sb_1", Port: 8080,
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
			Touch: func() { touched.Add(1) },
			Strip: []string{"X-Secret"},
			Failed: func(w http.ResponseWriter, err error) {
				http.Error(w, "no answer", http.StatusBadGateway)
			},
		})
	}))
	defer front.Close()

	req, _ := http.NewRequest("GET", front.URL+"/", nil)
	req.Header.Set("X-Secret", "s3")
	req.Header.Set("X-Keep", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := string(body); !strings.HasPrefix(got, "secret= keep=k host=127.0.0.1:8080") {
		t.Errorf("the port got %q; want the stripped header gone, the other kept, and the port's own host", got)
	}
	if touched.Load() == 0 {
		t.Error("reading the answer did not count as activity")
	}
	waitOpen(t, p, 0)

	// An upgraded connection stays open, is counted, and CloseAll cuts it.
	c, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(c)
	hr, err := http.ReadResponse(br, nil)
	if err != nil || hr.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", hr, err)
	}
	if line, _ := br.ReadString('\n'); line != "hello\n" {
		t.Fatalf("upgraded stream said %q", line)
	}
	waitOpen(t, p, 1)
	p.CloseAll("sb_1", 8081) // another port: nothing cut
	if p.open("sb_1", 8080) != 1 {
		t.Fatal("closing another port cut this one's connection")
	}
	p.CloseAll("sb_1", 8080)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("the upgraded connection outlived CloseAll")
	}
	waitOpen(t, p, 0)
}

func TestServeNothingListening(t *testing.T) {
	p := New()
	rec := httptest.NewRecorder()
	p.Serve(rec, httptest.NewRequest("GET", "/", nil), Target{SandboxID: "sb_1", Port: 1,
		Dial: func(ctx context.Context) (net.Conn, error) { return nil, &net.OpError{Op: "dial", Err: io.EOF} },
		Failed: func(w http.ResponseWriter, err error) {
			http.Error(w, "no answer: "+err.Error(), http.StatusBadGateway)
		},
	})
	if rec.Code != http.StatusBadGateway || p.open("sb_1", 1) != 0 {
		t.Fatalf("got %d %q with %d open", rec.Code, rec.Body, p.open("sb_1", 1))
	}
}

func waitOpen(t *testing.T, p *Proxy, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.open("sb_1", 8080) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", p.open("sb_1", 8080), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// open says how many connections to a sandbox's port are open.
func (p *Proxy) open(sandboxID string, port int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns[key{sandboxID, port}])
}
