package forward

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
)

// KeepBody reads a create's JSON body (at most jsonbody.MaxBytes) so that it can be
// both decoded here and sent on, and puts it back for the decoder.
func KeepBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, jsonbody.MaxBytes+1))
	if err != nil && !errors.As(err, new(*http.MaxBytesError)) {
		return nil, err
	}
	rewind(r, raw)
	return raw, nil
}

func rewind(r *http.Request, raw []byte) {
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
}

// PlaceCreate asks place where req goes (self is this node's name); when it names
// another node, the create (r, whose body KeepBody kept as raw) is sent there by send,
// which proxies it as the plane's caller: that node creates it, as a forwarded call. A
// refusal that is that node's own (unavailable, draining, full) is retried once on the
// next node place names, when it names one; otherwise the refusal is the answer. done
// says the call was answered; when it is not, the create is this node's.
func PlaceCreate(w http.ResponseWriter, r *http.Request, raw []byte, place Place, req PlaceRequest, self string,
	send func(Call) error) (done bool, err error) {
	node, err := place(r.Context(), req)
	if err != nil {
		return true, err
	}
	if node == "" || node == self {
		return false, nil
	}
	rewind(r, raw)
	err = send(Call{Node: node, Decline: DeclineForCapacity(node)})
	var d *Declined
	if !errors.As(err, &d) && !errors.Is(err, errdefs.ErrUnavailable) { // unavailable: lost, stopped, unreachable
		return true, err
	}
	req.Exclude = []string{node}
	next, perr := place(r.Context(), req)
	switch {
	case perr != nil || next == node:
		if d != nil {
			d.Write(w)
			return true, nil
		}
		return true, err
	case next == "" || next == self:
		return false, nil
	}
	rewind(r, raw)
	return true, send(Call{Node: next})
}
