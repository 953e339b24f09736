package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestDownloadRange: a file's part comes as 206 with its Content-Range, from the agent's
// ranged read; a range past the end is 416; a range the API does not serve (several,
// malformed) is refused rather than answered with the whole file.
func TestDownloadRange(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(bg, "box", "/tmp/digits", 0o644, strings.NewReader("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, part := range []struct {
		off, n int64
		want   string
		size   int64
	}{{2, 3, "234", 10}, {7, 0, "789", 10}, {8, 100, "89", 10}, {10, 0, "", 10}, {50, 3, "", 10}} {
		var buf bytes.Buffer
		got, size, err := c.DownloadRange(bg, "box", "/tmp/digits", part.off, part.n, &buf)
		if err != nil || buf.String() != part.want || got != int64(len(part.want)) || size != part.size {
			t.Errorf("DownloadRange(%d, %d) = %d %q (size %d) %v, want %q (size %d)", part.off, part.n, got, buf.String(), size, err, part.want, part.size)
		}
	}

	// Raw Range headers, as curl or a browser would send them.
	raw := func(rng string) (int, string, string) {
		t.Helper()
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.Socket)
		}}
		req, _ := http.NewRequest("GET", "http://airlock/v1/sandboxes/box/files?path="+url.QueryEscape("/tmp/digits"), nil)
		req.Header.Set("Range", rng)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Range"), string(b)
	}
	for rng, want := range map[string]string{
		"bytes=-3":      "206 bytes 7-9/10 789",
		"bytes=0-0":     "206 bytes 0-0/10 0",
		"bytes=4-":      "206 bytes 4-9/10 456789",
		"bytes=20-":     "416 bytes */10",
		"bytes=1-2,4-5": "400",
		"bytes=5-2":     "400",
		"lines=1-2":     "400",
		"bytes=-0":      "400",
	} {
		st, cr, body := raw(rng)
		got := fmt.Sprintf("%d %s %s", st, cr, body)
		if st >= 400 {
			got = strings.TrimSpace(fmt.Sprintf("%d %s", st, cr))
		}
		if got != want {
			t.Errorf("Range %s: %q, want %q", rng, got, want)
		}
	}
}
