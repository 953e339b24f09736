package manager

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// reason says why err happened in words any caller may read: the messages of the
// client-facing errors along its chain, then the condition of the node at its root (a
// full disk, a damaged file system); "" when it has neither. The rest of err (host
// paths, commands' output) is for the daemon's log alone.
func reason(err error) string {
	var parts []string
	for e := err; e != nil; {
		var ce *errdefs.Error
		if !errors.As(e, &ce) || ce.Class == errdefs.ErrInternal {
			break
		}
		parts = append(parts, ce.Msg)
		e = ce.Cause
	}
	if r := nodeCondition(err); r != "" {
		parts = append(parts, r)
	}
	return strings.Join(parts, ": ")
}

// nodeCondition names the state of the node that made err, or "" for none it knows.
func nodeCondition(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the node's disk is full"
	case errors.Is(err, syscall.EBADMSG), errors.Is(err, syscall.EUCLEAN):
		return "a file system on the node is damaged"
	case errors.Is(err, syscall.EROFS):
		return "a file system on the node is read-only"
	case errors.Is(err, syscall.EIO):
		return "the node's disk failed a read or write"
	case errors.Is(err, context.DeadlineExceeded):
		return "it took too long"
	}
	return ""
}

// unavailable is an unavailable error for cause whose message, made from format and
// args, goes on with the reason for cause when there is one to tell.
func unavailable(cause error, format string, args ...any) *errdefs.Error {
	e := errdefs.Unavailable(format, args...).WithCause(cause)
	if r := reason(cause); r != "" {
		e.Msg += ": " + r
	}
	return e
}
