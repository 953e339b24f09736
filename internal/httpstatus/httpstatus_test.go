package httpstatus

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errdefs.NotFound("x"), http.StatusNotFound},
		{fmt.Errorf("wrapped: %w", errdefs.ErrPermissionDenied), http.StatusForbidden},
		{errdefs.VersionConflict("x"), http.StatusPreconditionFailed},
		{errdefs.Quota("x"), http.StatusTooManyRequests},
		{&errdefs.Error{Class: errdefs.ErrInvalidArgument, Msg: "big", Cause: jsonbody.ErrTooLarge}, http.StatusRequestEntityTooLarge},
		{errors.New("unclassified"), http.StatusInternalServerError},
	} {
		if got := Status(tc.err); got != tc.want {
			t.Errorf("Status(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// Every class has a status, so no class falls through to 500 by being forgotten.
func TestEveryClassHasAStatus(t *testing.T) {
	for _, code := range errdefs.Codes() {
		if code == "internal" {
			continue // the one class that is 500
		}
		if got := Status(errdefs.FromCode(code)); got == http.StatusInternalServerError {
			t.Errorf("class %s has no status of its own (got 500)", code)
		}
	}
}
