package httpedge

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpstatus"
)

func TestRunRecordsWhatTheRequestAuditNeeds(t *testing.T) {
	ew := func(w http.ResponseWriter, r *http.Request, err error) {
		WriteJSON(w, httpstatus.Status(err), map[string]string{"code": errdefs.Code(err)})
	}
	for _, tc := range []struct {
		name       string
		h          Handler
		wantStatus int
		wantResult string
		wantBody   string
	}{
		{"refused", func(w http.ResponseWriter, r *http.Request) error { return errdefs.NotFound("no such thing") },
			404, "404 not_found", `{"code":"not_found"}` + "\n"},
		{"answered", func(w http.ResponseWriter, r *http.Request) error { WriteJSON(w, 201, "<ok>"); return nil },
			201, "201", `"<ok>"` + "\n"},
		{"silent", func(w http.ResponseWriter, r *http.Request) error { return nil }, 200, "200", ""},
	} {
		w := httptest.NewRecorder()
		status, err := Run(w, httptest.NewRequest("GET", "/", nil), ew, tc.h)
		if status != tc.wantStatus || w.Code != tc.wantStatus {
			t.Errorf("%s: recorded %d, answered %d; want %d", tc.name, status, w.Code, tc.wantStatus)
		}
		if got := auditResult(status, err); got != tc.wantResult {
			t.Errorf("%s: audit result %q, want %q", tc.name, got, tc.wantResult)
		}
		if w.Body.String() != tc.wantBody {
			t.Errorf("%s: body %q, want %q", tc.name, w.Body.String(), tc.wantBody)
		}
	}
}

// An internal failure's cause goes to the log under the id the caller is given.
func TestLogInternalKeepsTheCauseUnderTheID(t *testing.T) {
	var log strings.Builder
	id := LogInternal(slog.New(slog.NewTextHandler(&log, nil)), "request failed", errors.New("disk I/O error on /var/lib/x"), "path", "/p")
	if !regexp.MustCompile(`^req_[0-9a-f]{16}$`).MatchString(id) {
		t.Errorf("request id %q, want req_ and 16 hex digits", id)
	}
	if got := log.String(); !strings.Contains(got, "request_id="+id) || !strings.Contains(got, "/var/lib/x") || !strings.Contains(got, "path=/p") {
		t.Errorf("log %q: want the id, the cause and the plane's fields", got)
	}
	if other := NewRequestID(); other == id {
		t.Errorf("two request ids are both %s", id)
	}
}
