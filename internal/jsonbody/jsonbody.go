// Package jsonbody reads the JSON body of a request to any of the daemon's HTTP planes:
// one value of at most MaxBytes. It imports no Airlock package but errdefs, so that what
// tests it (a fuzz target above all) links no daemon.
package jsonbody

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// MaxBytes bounds every JSON request body.
const MaxBytes = 1 << 20

// ErrTooLarge marks an oversize body: invalid_argument, with status 413.
var ErrTooLarge = errors.New("request body too large")

// Options say what a plane accepts besides one JSON value that v knows every field of.
type Options struct {
	// AllowUnknown ignores fields v does not know (E2B's SDKs add fields over time).
	AllowUnknown bool
	// Optional allows an empty body, which leaves v as it was.
	Optional bool
}

// Decode reads r's body into v. A body that is larger than MaxBytes, not JSON, more
// than one value, or (unless o allows) empty or with a field v does not know is
// invalid_argument.
func Decode(w http.ResponseWriter, r *http.Request, v any, o Options) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBytes))
	if !o.AllowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Msg: fmt.Sprintf("request body is larger than %d bytes", MaxBytes), Cause: ErrTooLarge}
		case errors.Is(err, io.EOF):
			if o.Optional {
				return nil
			}
			return errdefs.Invalid("request body is empty; a JSON object is required")
		default:
			return errdefs.Invalid("invalid request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if dec.More() {
		return errdefs.Invalid("invalid request body: more than one JSON value")
	}
	return nil
}
