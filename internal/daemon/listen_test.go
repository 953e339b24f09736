package daemon

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
)

func TestWarnPlainHTTP(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{
		{"127.0.0.1:7070", false}, {"[::1]:7070", false},
		{"0.0.0.0:7070", true}, {"[::]:7070", true}, {"192.0.2.10:7070", true},
	} {
		var buf bytes.Buffer
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		warnPlainHTTP(slog.New(slog.NewTextHandler(&buf, nil)), "listen", addr)
		if got := strings.Contains(buf.String(), "plain HTTP"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %q", tc.addr, got, tc.warn, buf.String())
		}
	}
}
