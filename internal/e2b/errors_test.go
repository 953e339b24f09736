package e2b

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// An internal failure's cause stays in the log, on both of the plane's edges (its HTTP
// routes and its Connect services), and the caller hears a request id the log has it
// under, as on the native API.
func TestInternalErrorsCarryARequestID(t *testing.T) {
	var log strings.Builder
	c := &Control{log: slog.New(slog.NewTextHandler(&log, nil))}
	raw := errors.New("sqlite: open /var/lib/airlock/airlock.db: disk I/O error")
	idRE := regexp.MustCompile(`req_[0-9a-f]{16}`)
	for _, edge := range []struct {
		name string
		msg  func() string
	}{
		{"http", func() string { return c.toAPIError(httptest.NewRequest("GET", "/sandboxes", nil), raw).Message }},
		{"connect", func() string {
			var ce *connect.Error
			errors.As(c.connectError("/process.Process/List", raw), &ce)
			return ce.Message()
		}},
	} {
		msg := edge.msg()
		id := idRE.FindString(msg)
		if id == "" || strings.Contains(msg, "/var/lib") {
			t.Errorf("%s: an internal error answered %q; want a request id and no host path", edge.name, msg)
			continue
		}
		if !strings.Contains(log.String(), "request_id="+id) || !strings.Contains(log.String(), "disk I/O error") {
			t.Errorf("%s: the log does not have request %s with its cause:\n%s", edge.name, id, log.String())
		}
	}
	if e := c.toAPIError(httptest.NewRequest("GET", "/sandboxes", nil), errdefs.Invalid("bad %s", "x")); e.Message != "bad x" {
		t.Errorf("an invalid-argument error answered %q", e.Message)
	}
}
