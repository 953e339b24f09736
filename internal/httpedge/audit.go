package httpedge

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// RequestAudit is the request audit every plane shares: each request it answers is
// recorded in the audit log, and nothing changes that the log cannot record.
type RequestAudit struct {
	Log    *audit.Chain // nil: the node keeps no audit log
	Logger *slog.Logger // where a failure to record goes (the answer is already sent)
}

// Ready refuses a request that changes something while the audit log cannot be written.
func (a RequestAudit) Ready(changes bool) error {
	if !changes || a.Log == nil {
		return nil
	}
	return a.Log.Healthy()
}

// Record records one answered request: the plane says who, what and on what in e; the
// edge adds the result (unless e has one), the duration, and clips the action (part of
// it may be the caller's choice). What the call's own work held back (audit.Hold) is
// written in the same write, first.
func (a RequestAudit) Record(r *http.Request, e audit.Entry, status int, err error, start time.Time) {
	if a.Log == nil {
		return
	}
	if e.Result == "" {
		e.Result = auditResult(status, err)
	}
	e.Action = audit.Clip(e.Action)
	e.Detail = map[string]any{"duration_ms": time.Since(start).Milliseconds()}
	if aerr := a.Log.Release(r.Context(), e); aerr != nil {
		a.Logger.Error("audit log", "err", aerr)
	}
}

// auditResult is what the request audit records of an answer: its status and, for a
// refused request, the error's code.
func auditResult(status int, err error) string {
	result := strconv.Itoa(status)
	if err != nil {
		result += " " + errdefs.Code(err)
	}
	return result
}
