// Package httpstatus holds the one table from an error's class to its HTTP status, a
// leaf both the daemon's HTTP edge (httpedge) and the public Go SDK read, so that the
// SDK links nothing of the daemon. It imports no Airlock package but errdefs and
// jsonbody.
package httpstatus

import (
	"errors"
	"net/http"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
)

var statuses = []struct {
	class  error
	status int
}{
	{errdefs.ErrNotFound, http.StatusNotFound},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest},
	{errdefs.ErrAlreadyExists, http.StatusConflict},
	{errdefs.ErrVersionConflict, http.StatusPreconditionFailed},
	{errdefs.ErrIdempotencyConflict, http.StatusConflict},
	{errdefs.ErrQuotaExceeded, http.StatusTooManyRequests},
	{errdefs.ErrPermissionDenied, http.StatusForbidden},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized},
	{errdefs.ErrFailedPrecondition, http.StatusConflict},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable},
	{errdefs.ErrInternal, http.StatusInternalServerError},
}

// Status is the one place an error becomes an HTTP status: its class's, except that an
// oversize body is 413. Anything unclassified is 500.
func Status(err error) int {
	if errors.Is(err, jsonbody.ErrTooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	for _, s := range statuses {
		if errors.Is(err, s.class) {
			return s.status
		}
	}
	return http.StatusInternalServerError
}
