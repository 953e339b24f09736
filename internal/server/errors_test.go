package server

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// An unclassified error's text (a database error naming a host path) never reaches the
// caller: the answer is "internal" with a request id, and the log has the cause.
func TestInternalErrorsStayInTheLog(t *testing.T) {
	var log strings.Builder
	s := &Server{log: slog.New(slog.NewTextHandler(&log, nil))}
	r := httptest.NewRequest("POST", "/v1/sandboxes", nil)
	raw := errors.New("sqlite: open /var/lib/airlock/airlock.db: disk I/O error")
	for _, err := range []error{raw, &errdefs.Error{Class: errdefs.ErrInternal, Msg: "write /var/lib/airlock/x: disk I/O error", Cause: raw}} {
		status, e := s.apiError(r, err)
		id, _ := e.Details["request_id"].(string)
		if status != 500 || e.Code != "internal" || strings.Contains(e.Message, "/var/lib") || id == "" || !strings.Contains(e.Message, id) {
			t.Errorf("%v answered %d %+v; want 500, internal, a request id and no host path", err, status, e)
		}
		if !strings.Contains(log.String(), id) || !strings.Contains(log.String(), "disk I/O error") {
			t.Errorf("the log does not have request %s with its cause:\n%s", id, log.String())
		}
	}
	// Errors of other classes keep their message.
	if _, e := s.apiError(r, errdefs.Invalid("name %q is too long", "x")); e.Message != `name "x" is too long` {
		t.Errorf("an invalid-argument error answered %q", e.Message)
	}
}
