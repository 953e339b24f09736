package manager

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
	"github.com/airlockhq/airlock/internal/store"
)

// DefaultMaxFileUpload is the most bytes one uploaded file may have unless configured.
const DefaultMaxFileUpload = 1 << 30

// MaxFileUpload is the most bytes one uploaded file may have, whichever plane it comes
// through.
func (m *Manager) MaxFileUpload() int64 { return m.cfg.MaxFileUpload }

// upload writes r to the file at p in sb, with mode and owned by uid and gid (0 and 0:
// the sandbox's root). The agent writes a temporary file beside p and renames it into
// place or, inPlace, stages it unnamed and writes it under its own name (see
// agentproto.Request.InPlace); either way a failed upload leaves what was there. A
// file past MaxFileUpload bytes is refused with jsonbody.ErrTooLarge (413), and
// nothing is written.
func (m *Manager) upload(ctx context.Context, sb *store.Sandbox, cl *agent.Client, p string, mode uint32, uid, gid int, inPlace bool, r io.Reader) (int64, error) {
	lr := &LimitReader{R: r, N: m.cfg.MaxFileUpload}
	send := cl.Upload
	if inPlace {
		send = cl.UploadInPlace
	}
	n, err := send(ctx, p, mode, uid, gid, lr)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(lr.Err, jsonbody.ErrTooLarge):
		return 0, &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: jsonbody.ErrTooLarge,
			Msg: fmt.Sprintf("%s: an uploaded file is at most %d bytes (files.max_upload); nothing was written", p, m.cfg.MaxFileUpload)}
	case lr.Err != nil:
		return 0, errdefs.Invalid("%s: reading the upload: %v; nothing was written", p, lr.Err)
	}
	return 0, m.agentFailed(sb, err)
}

// LimitReader reads R and fails with jsonbody.ErrTooLarge past N bytes. Err keeps the
// first error of R other than io.EOF, so a failed upload can tell the body's fault from
// the sandbox's.
type LimitReader struct {
	R   io.Reader
	N   int64
	Err error
}

func (l *LimitReader) Read(b []byte) (int, error) {
	if l.Err != nil {
		return 0, l.Err
	}
	if int64(len(b)) > l.N+1 {
		b = b[:l.N+1]
	}
	k, err := l.R.Read(b)
	if l.N -= int64(k); l.N < 0 {
		l.Err = jsonbody.ErrTooLarge
		return 0, l.Err
	}
	if err != nil && err != io.EOF {
		l.Err = err
	}
	return k, err
}
