package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestRefusalsAreTheAPIsErrors: the proxy answers in the native API's error shape, and
// an internal failure as the API does: a request id in the message and the details,
// the cause only in the log, under that id. (A CONNECT that cannot be taken over gets
// this plain answer too.)
func TestRefusalsAreTheAPIsErrors(t *testing.T) {
	var logBuf bytes.Buffer
	p := &Proxy{log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	const cause = "hijack failed on /host/private/path"
	for _, c := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"refused", denied("egress to x.example:443 refused: not in the allowlist"), http.StatusForbidden, "permission_denied"},
		{"upstream failed", errdefs.Unavailable("upstream x.example:443 failed"), http.StatusBadGateway, "unavailable"},
		{"internal", &errdefs.Error{Class: errdefs.ErrInternal, Msg: "cannot take over the connection", Cause: errors.New(cause)},
			http.StatusInternalServerError, "internal"},
	} {
		logBuf.Reset()
		w := httptest.NewRecorder()
		p.refuse(w, Record{Method: http.MethodConnect}, c.err)
		raw := w.Body.String()
		var body api.ErrorBody
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			t.Errorf("%s: body %q is not the API's error shape: %v", c.name, raw, err)
			continue
		}
		if w.Code != c.status || body.Error.Code != c.code || body.Error.Message == "" {
			t.Errorf("%s: got %d %+v, want %d with code %s and a message", c.name, w.Code, body.Error, c.status, c.code)
		}
		if w.Header().Get(DecisionHeader) == "" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: headers %v, want a decision and JSON", c.name, w.Header())
		}
		if c.code != "internal" {
			if body.Error.Message != errdefs.Message(c.err) || len(body.Error.Details) != 0 {
				t.Errorf("%s: got %+v, want the error's own message and no details", c.name, body.Error)
			}
			continue
		}
		id, _ := body.Error.Details["request_id"].(string)
		if !regexp.MustCompile(`^req_[0-9a-f]{16}$`).MatchString(id) || !strings.Contains(body.Error.Message, id) {
			t.Errorf("internal: got %+v, want a request id in the details and the message", body.Error)
		}
		if strings.Contains(raw, cause) {
			t.Errorf("internal: the answer %q carries the cause", raw)
		}
		if log := logBuf.String(); id == "" || !strings.Contains(log, id) || !strings.Contains(log, cause) {
			t.Errorf("internal: the log %q does not hold the cause under request id %q", log, id)
		}
	}
}
