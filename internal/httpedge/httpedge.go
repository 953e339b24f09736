// Package httpedge is the HTTP edge every plane of the daemon shares, and the egress
// proxy's answers to sandboxes too: the adapter from handlers that return errors, JSON
// writing, request ids for failures and what a caller hears of an internal one, and the
// request audit (the table from error class to HTTP status is httpstatus's). Each plane
// keeps only its own error shape (a small ErrorWriter) and says who called and on what. It imports no
// Airlock package but errdefs, jsonbody and audit, and knows nothing of sandboxes,
// callers or stores.
package httpedge

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Handler is a route's handler: it writes its answer, or returns the error that refuses
// the request. A handler that has begun its answer (a stream) reports later failures in
// the stream and returns nil.
type Handler func(w http.ResponseWriter, r *http.Request) error

// ErrorWriter writes a handler's error in a plane's shape.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, err error)

// Adapt returns the http.HandlerFunc that runs h and writes its error with ew.
func Adapt(ew ErrorWriter, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { Run(w, r, ew, h) }
}

// Run runs h, writes its error with ew, and returns the status the request was
// answered with and h's error: what the request audit records.
func Run(w http.ResponseWriter, r *http.Request, ew ErrorWriter, h Handler) (status int, err error) {
	rec := &Recorder{ResponseWriter: w}
	if err = h(rec, r); err != nil && !errors.As(err, new(cutError)) {
		ew(rec, r, err)
	}
	return rec.Status(), err
}

// WriteJSON answers v as JSON with status (EncodeJSON).
// The length goes with it, so that a flushed answer is whole at the client before the
// handler returns.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	WriteJSONBody(w, status, EncodeJSON(v))
}

// WriteJSONBody answers b, JSON already encoded, with status, as WriteJSON does.
func WriteJSONBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// EncodeJSON is v as JSON, without escaping HTML, ending in a newline: for an answer
// that must know its length first (the egress proxy's to a refused CONNECT).
func EncodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return b.Bytes()
}

// NewRequestID names one failed request, of any plane, in the log and in its answer.
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// InternalAnswer is what the caller of a request that failed inside hears instead of
// the cause err: a message naming a new request id, and that id as details (the native
// API's and the egress proxy's "request_id"); the cause is logged under the id.
func InternalAnswer(log *slog.Logger, what string, err error, args ...any) (msg string, details map[string]any) {
	id := LogInternal(log, what, err, args...)
	return errdefs.InternalMessage("request", id), map[string]any{"request_id": id}
}

// LogInternal logs an internal failure's cause under a new request id and returns the
// id: the caller hears the id, the log holds the cause.
func LogInternal(log *slog.Logger, what string, err error, args ...any) string {
	id := NewRequestID()
	log.Error(what, append(args, "request_id", id, "err", err)...)
	return id
}
