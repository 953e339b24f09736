package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/manager"
)

// oldAgent reads only whole files, as an agent older than ranged reads.
type oldAgent struct{ data string }

func (a oldAgent) Download(_ context.Context, _ string, w io.Writer) (int64, error) {
	n, err := io.Copy(w, strings.NewReader(a.data))
	return n, err
}

func (oldAgent) DownloadRange(context.Context, string, int64, int64, io.Writer) (int64, error) {
	return 0, manager.ErrNoRangedRead
}

// TestDownloadRangeFromAnOldAgent: the part is cut on the daemon, so the answer is the
// 206 with the part's length that a ranged read gives, never the whole file.
func TestDownloadRangeFromAnOldAgent(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct{ rng, want, contentRange string }{
		{"bytes=2-5", "2345", "bytes 2-5/10"},
		{"bytes=-3", "789", "bytes 7-9/10"},
		{"bytes=8-", "89", "bytes 8-9/10"},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		if err := s.downloadRange(w, r, &httpedge.Tracker{W: w}, oldAgent{"0123456789"}, "/f", tc.rng, 10); err != nil {
			t.Fatalf("%s: %v", tc.rng, err)
		}
		if w.Code != 206 || w.Body.String() != tc.want || w.Header().Get("Content-Range") != tc.contentRange ||
			w.Header().Get("Content-Length") != strconv.Itoa(len(tc.want)) {
			t.Errorf("%s: %d %q, Content-Range %q, Content-Length %q; want 206 %q, %q", tc.rng, w.Code, w.Body.String(),
				w.Header().Get("Content-Range"), w.Header().Get("Content-Length"), tc.want, tc.contentRange)
		}
	}
}

// endlessAgent answers a whole-file read without end, as a hostile sandbox can.
type endlessAgent struct{ sent *int64 }

func (a endlessAgent) Download(_ context.Context, _ string, w io.Writer) (int64, error) {
	chunk := []byte(strings.Repeat("x", 4096))
	for *a.sent < 1<<30 {
		n, err := w.Write(chunk)
		*a.sent += int64(n)
		if err != nil {
			return *a.sent, err
		}
	}
	return *a.sent, nil
}

func (endlessAgent) DownloadRange(context.Context, string, int64, int64, io.Writer) (int64, error) {
	return 0, manager.ErrNoRangedRead
}

// TestDownloadRangeStopsReadingAnOldAgent: once the part is cut, nothing more of the
// whole file is read, however much the sandbox would send.
func TestDownloadRangeStopsReadingAnOldAgent(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	var sent int64
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/sandboxes/box/files?path=/f", nil)
	if err := s.downloadRange(w, r, &httpedge.Tracker{W: w}, endlessAgent{&sent}, "/f", "bytes=5000-5009", 1<<40); err != nil {
		t.Fatal(err)
	}
	if w.Code != 206 || w.Body.String() != strings.Repeat("x", 10) || sent > 3*4096 {
		t.Errorf("%d %q after the agent sent %d bytes; want 206 with ten bytes, and no more read than the part needs", w.Code, w.Body.String(), sent)
	}
}
