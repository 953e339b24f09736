package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"

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

// Download copies the file at path in the sandbox to w and returns the bytes copied.
func (c *Client) Download(ctx context.Context, ref, path string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files"), query: filesQuery(path)})
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
