package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpstatus"
)

// Error is an error answer from the daemon: an HTTP status, the stable API code, a
// message meant for people and optional machine-readable details. errors.Is sees its
// class, so errors.Is(err, errdefs.ErrNotFound) works.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string { return e.Message + " (" + e.Code + ")" }

// Unwrap returns the errdefs class of the code (errdefs.ErrInternal for an unknown one).
func (e *Error) Unwrap() error { return errdefs.FromCode(e.Code) }

// IsNotFound reports whether err is of class not_found.
func IsNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

// IsAlreadyExists reports whether err is of class already_exists.
func IsAlreadyExists(err error) bool { return errors.Is(err, errdefs.ErrAlreadyExists) }

// IsVersionConflict reports whether err is of class version_conflict (a stale If-Match).
func IsVersionConflict(err error) bool { return errors.Is(err, errdefs.ErrVersionConflict) }

// IsUnavailable reports whether err is of class unavailable, which includes failing to
// reach the daemon at all; the outcome of a mutating call is then unknown.
func IsUnavailable(err error) bool { return errors.Is(err, errdefs.ErrUnavailable) }

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// decodeError reads a non-2xx answer. A body that is not the API's error shape (from a
// proxy, say) still yields an *Error, with a code derived from the status.
func decodeError(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body api.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		return &Error{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, Details: body.Error.Details}
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: msg}
}

// streamError turns an error event inside a 200 stream into an *Error, with the status
// its code would have had.
func streamError(e *api.Error) *Error {
	if e == nil {
		e = &api.Error{Code: "internal", Message: "stream error without details"}
	}
	status := httpstatus.Status(errdefs.FromCode(e.Code))
	return &Error{Status: status, Code: e.Code, Message: e.Message, Details: e.Details}
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "failed_precondition"
	case http.StatusPreconditionFailed:
		return "version_conflict"
	case http.StatusTooManyRequests:
		return "quota_exceeded"
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return "unavailable"
	}
	return "internal"
}
