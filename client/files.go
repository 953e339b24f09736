package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
)

// Upload writes r to path in the sandbox, replacing any file there. mode gives the
// permission bits (with setuid, setgid and sticky); zero leaves the daemon's default.
func (c *Client) Upload(ctx context.Context, ref, path string, mode os.FileMode, r io.Reader) (*api.FileInfo, error) {
	q := filesQuery(path)
	if m := wireMode(mode); m != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(m), 8))
	}
	var fi api.FileInfo
	req := request{method: http.MethodPut, path: sandboxPath(ref, "files"), query: q, body: r, size: readerSize(r)}
	if err := c.do(ctx, req, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// DownloadRange copies length bytes (0: to the end) of the file at path, from offset,
// to w, and returns the bytes copied and the file's whole size (-1 when the daemon does
// not say). A range that starts past the end copies nothing.
func (c *Client) DownloadRange(ctx context.Context, ref, path string, offset, length int64, w io.Writer) (n, size int64, err error) {
	if offset < 0 || length < 0 {
		return 0, 0, &Error{Code: "invalid_argument", Message: "offset and length must not be negative"}
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng = fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files"), query: filesQuery(path),
		header: http.Header{"Range": {rng}}})
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusRequestedRangeNotSatisfiable {
		size = -1
		if v, ok := e.Details["size"].(float64); ok && v >= 0 { // the daemon says how long the file is
			size = int64(v)
		}
		return 0, size, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	size = -1
	var cut *rangeWriter
	if resp.StatusCode != http.StatusPartialContent {
		// A daemon without ranges (or a file it gives whole, a symbolic link): the part
		// is cut from the whole.
		cut = &rangeWriter{w: w, skip: offset, left: length}
		w = cut
	} else if _, total, ok := strings.Cut(resp.Header.Get("Content-Range"), "/"); ok {
		size, _ = strconv.ParseInt(total, 10, 64)
	}
	n, err = io.Copy(w, resp.Body)
	if cut != nil {
		n = cut.wrote
		if errors.Is(err, errRangeDone) {
			err = nil
		}
	}
	if err != nil && ctx.Err() != nil {
		return n, size, ctx.Err()
	}
	if err == nil && resp.StatusCode == http.StatusPartialContent && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return n, size, err
}

// errRangeDone ends a whole file's copy once its range is written.
var errRangeDone = errors.New("range complete")

// rangeWriter passes on left bytes (0: all) of what is written to it, after the
// first skip.
type rangeWriter struct {
	w                 io.Writer
	skip, left, wrote int64
}

func (r *rangeWriter) Write(p []byte) (int, error) {
	n := len(p)
	k := min(r.skip, int64(len(p)))
	r.skip -= k
	p = p[k:]
	if r.left > 0 && int64(len(p)) >= r.left {
		if _, err := r.w.Write(p[:r.left]); err != nil {
			return 0, err
		}
		r.wrote += r.left
		r.left = 0
		return n, errRangeDone
	}
	if len(p) > 0 {
		if _, err := r.w.Write(p); err != nil {
			return 0, err
		}
		r.wrote += int64(len(p))
		if r.left > 0 {
			r.left -= int64(len(p))
		}
	}
	return n, nil
}

// Download copies the file at path in the sandbox to w and returns the bytes copied.
func (c *Client) Download(ctx context.Context, ref, path string, w io.Writer) (int64, error) {
	return c.copyBody(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files"), query: filesQuery(path)}, w)
}

// copyBody performs r and copies its answer's body to w; a body shorter than its
// Content-Length is io.ErrUnexpectedEOF.
func (c *Client) copyBody(ctx context.Context, r request, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil && ctx.Err() != nil {
		return n, ctx.Err()
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// ListFiles lists the directory at path.
func (c *Client) ListFiles(ctx context.Context, ref, path string) ([]api.FileInfo, error) {
	var out api.FileList
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files", "list"), query: filesQuery(path)}, &out); err != nil {
		return nil, err
	}
	return out.Files, nil
}

// Stat describes the file at path.
func (c *Client) Stat(ctx context.Context, ref, path string) (*api.FileInfo, error) {
	var fi api.FileInfo
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files", "stat"), query: filesQuery(path)}, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Mkdir makes a directory; with parents, missing parents too (and an existing directory
// is not an error).
func (c *Client) Mkdir(ctx context.Context, ref, path string, parents bool) error {
	r := request{method: http.MethodPost, path: sandboxPath(ref, "files", "mkdir"), in: api.MkdirRequest{Path: path, Parents: parents}}
	return c.do(ctx, r, nil)
}

// Remove deletes a file or an empty directory; with recursive, a directory and all it holds.
func (c *Client) Remove(ctx context.Context, ref, path string, recursive bool) error {
	q := filesQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, request{method: http.MethodDelete, path: sandboxPath(ref, "files"), query: q}, nil)
}

// filesQuery is the query of the files routes.
func filesQuery(path string) url.Values { return url.Values{"path": {path}} }

// wireMode turns an os.FileMode into Unix permission bits.
func wireMode(m os.FileMode) uint32 {
	bits := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

// readerSize is the length of r when it is known without reading it, or -1.
func readerSize(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }: // bytes.Buffer, bytes.Reader, strings.Reader
		return int64(v.Len())
	case *os.File:
		if fi, err := v.Stat(); err == nil && fi.Mode().IsRegular() {
			if off, err := v.Seek(0, io.SeekCurrent); err == nil {
				return fi.Size() - off
			}
		}
	}
	return -1
}
