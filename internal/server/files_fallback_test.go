package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

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
		if err := s.downloadRange(w, r, &trackingWriter{w: w}, oldAgent{"0123456789"}, nil, "/f", tc.rng, 10); err != nil {
			t.Fatalf("%s: %v", tc.rng, err)
		}
		if w.Code != 206 || w.Body.String() != tc.want || w.Header().Get("Content-Range") != tc.contentRange ||
			w.Header().Get("Content-Length") != strconv.Itoa(len(tc.want)) {
			t.Errorf("%s: %d %q, Content-Range %q, Content-Length %q; want 206 %q, %q", tc.rng, w.Code, w.Body.String(),
				w.Header().Get("Content-Range"), w.Header().Get("Content-Length"), tc.want, tc.contentRange)
		}
	}
}
