package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
)

// The default bounds of one directory tree uploaded as a tar stream.
const (
	DefaultMaxTreeEntries = 500_000
	DefaultMaxTreeBytes   = 8 << 30
)

// TreeResult counts what an uploaded tree held.
type TreeResult = agentproto.TreeResult

// UploadTree unpacks the tar stream r into the directory path of the sandbox (made
// with its missing parents). The agent unpacks it under the sandbox's root, never
// following a link and refusing devices, FIFOs, names out of the directory and hard
// links out of it; the daemon never opens a path of the sandbox itself. A stream past
// files.max_tree_bytes, or an archive past files.max_tree_entries entries, is refused
// naming the limit; what came before the refused entry stays.
func (w *Work) UploadTree(ctx context.Context, path string, r io.Reader) (*TreeResult, error) {
	m := w.m
	lr := &LimitReader{R: r, N: m.cfg.MaxTreeBytes}
	lim := agentproto.TarLimits{MaxEntries: m.cfg.MaxTreeEntries, MaxBytes: m.cfg.MaxTreeBytes}
	res, err := w.cl.UploadTree(ctx, path, lim, lr)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(lr.Err, jsonbody.ErrTooLarge):
		return nil, &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: jsonbody.ErrTooLarge,
			Msg: fmt.Sprintf("%s: an uploaded tree's tar stream is at most %d bytes (files.max_tree_bytes)", path, m.cfg.MaxTreeBytes)}
	case lr.Err != nil:
		return nil, errdefs.Invalid("%s: reading the upload: %v", path, lr.Err)
	}
	// The agent applies the node's bounds too, to each entry as it comes; its refusal
	// is told with the setting's name.
	var re *agentproto.RemoteError
	if errors.As(err, &re) && re.Code == "invalid_argument" {
		switch {
		case strings.Contains(re.Message, "(the limit on entries)"):
			return nil, errdefs.Invalid("%s (files.max_tree_entries)", re.Message)
		case strings.Contains(re.Message, "would pass the limit of"):
			return nil, &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: jsonbody.ErrTooLarge, Msg: re.Message + " (files.max_tree_bytes)"}
		}
	}
	return nil, noTreeOps(err, w.fail(err))
}

// DownloadTree writes the tree under the directory path of the sandbox to out as a
// tar stream. The stream is the sandbox's: whoever unpacks it must check every entry
// (the CLI and the SDKs do).
func (w *Work) DownloadTree(ctx context.Context, path string, out io.Writer) (int64, error) {
	n, err := w.cl.DownloadTree(ctx, path, out)
	if err != nil {
		return n, noTreeOps(err, w.fail(err))
	}
	return n, nil
}

// noTreeOps explains an agent that predates tree copies; otherwise it returns mapped.
func noTreeOps(err, mapped error) error {
	var re *agentproto.RemoteError
	if errors.As(err, &re) && (strings.HasPrefix(re.Message, "unknown op") || strings.Contains(re.Message, "unknown field")) {
		return errdefs.Precondition("this sandbox's agent predates tree copies; restart the sandbox (suspend and resume) to copy trees")
	}
	return mapped
}
