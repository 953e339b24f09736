// Package errdefs owns Airlock's fixed set of error classes and the stable API codes
// they map to. Every layer wraps one of these classes with %w and tests it with
// errors.Is; the HTTP edge (internal/httpedge) alone maps a class to a status. It must
// not import any other Airlock package, nor net/http.
package errdefs

import (
	"errors"
	"fmt"
)

// The error classes. Wrap them with %w (or use the constructors below) and test with errors.Is.
var (
	ErrNotFound            = errors.New("not found")
	ErrInvalidArgument     = errors.New("invalid argument")
	ErrAlreadyExists       = errors.New("already exists")
	ErrVersionConflict     = errors.New("version conflict")
	ErrIdempotencyConflict = errors.New("idempotency conflict")
	ErrQuotaExceeded       = errors.New("quota exceeded")
	ErrPermissionDenied    = errors.New("permission denied")
	ErrUnauthenticated     = errors.New("unauthenticated")
	ErrFailedPrecondition  = errors.New("failed precondition")
	ErrUnavailable         = errors.New("unavailable")
	ErrInternal            = errors.New("internal")
)

// Error is an error meant for a client: a class, a message that is safe to show, and
// optional machine-readable details. The cause (if any) is for the server's log only.
type Error struct {
	Class   error
	Msg     string
	Details map[string]any
	Cause   error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

// Is lets errors.Is(err, ErrNotFound) see the class.
func (e *Error) Is(target error) bool { return e.Class == target }

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Cause }

func newf(class error, format string, args ...any) *Error {
	return &Error{Class: class, Msg: fmt.Sprintf(format, args...)}
}

// NotFound and friends build a client-facing error of one class.
func NotFound(format string, args ...any) *Error { return newf(ErrNotFound, format, args...) }
func Invalid(format string, args ...any) *Error  { return newf(ErrInvalidArgument, format, args...) }
func Exists(format string, args ...any) *Error   { return newf(ErrAlreadyExists, format, args...) }
func Precondition(format string, args ...any) *Error {
	return newf(ErrFailedPrecondition, format, args...)
}
func Unavailable(format string, args ...any) *Error { return newf(ErrUnavailable, format, args...) }
func Quota(format string, args ...any) *Error       { return newf(ErrQuotaExceeded, format, args...) }
func VersionConflict(format string, args ...any) *Error {
	return newf(ErrVersionConflict, format, args...)
}
func IdempotencyConflict(format string, args ...any) *Error {
	return newf(ErrIdempotencyConflict, format, args...)
}

// WithDetails returns e with details attached.
func (e *Error) WithDetails(d map[string]any) *Error { e.Details = d; return e }

var classes = []struct {
	class error
	code  string
}{
	{ErrNotFound, "not_found"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrAlreadyExists, "already_exists"},
	{ErrVersionConflict, "version_conflict"},
	{ErrIdempotencyConflict, "idempotency_conflict"},
	{ErrQuotaExceeded, "quota_exceeded"},
	{ErrPermissionDenied, "permission_denied"},
	{ErrUnauthenticated, "unauthenticated"},
	{ErrFailedPrecondition, "failed_precondition"},
	{ErrUnavailable, "unavailable"},
	{ErrInternal, "internal"},
}

// Code returns the stable API code for err; anything unclassified is internal.
func Code(err error) string {
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return c.code
		}
	}
	return "internal"
}

// Codes returns every API code, one per class.
func Codes() []string {
	out := make([]string, len(classes))
	for i, c := range classes {
		out[i] = c.code
	}
	return out
}

// FromCode returns the class for an API code, or ErrInternal for an unknown one.
func FromCode(code string) error {
	for _, c := range classes {
		if c.code == code {
			return c.class
		}
	}
	return ErrInternal
}

// Message returns the client-safe message of err: the Msg of an *Error, or a generic
// text for anything else (whose detail belongs in the server log).
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	if Code(err) == "internal" {
		return "internal error"
	}
	return err.Error()
}

// InternalMessage is what a caller hears of an internal failure: which of its requests
// or operations failed, so an operator can find the cause in the daemon's log.
func InternalMessage(kind, id string) string {
	return fmt.Sprintf("internal error in %s %s; the daemon's log says what failed", kind, id)
}

// Details returns the details of an *Error, if any.
func Details(err error) map[string]any {
	var e *Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}

// WithCause returns e with a cause attached (for the server's log).
func (e *Error) WithCause(err error) *Error { e.Cause = err; return e }
