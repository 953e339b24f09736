package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/tartree"
)

// TreeCount counts a tree copy's entries so far: files, directories, links and the
// bytes of files.
type TreeCount = tartree.Summary

// TreeOptions change a tree copy. The zero value (or nil) takes the defaults.
type TreeOptions struct {
	// MaxEntries and MaxBytes bound a download: the entries of the archive the
	// sandbox sends and the bytes of its files (defaults 500000 and 8 GiB). Past
	// either the download is refused, naming the limit.
	MaxEntries, MaxBytes int64
	// Progress, if set, is called after each entry with the counts so far.
	Progress func(TreeCount)
}

func (o *TreeOptions) progress() func(TreeCount) {
	if o == nil {
		return nil
	}
	return o.Progress
}

// ErrArchiveRefused matches the error of a download whose archive had an entry that
// is never unpacked (an absolute name, "..", a path through a link, a device, a hard
// link out) or passed a limit; the error says which entry and why.
var ErrArchiveRefused = tartree.ErrRefused

// UploadTar unpacks the tar stream r into the directory dir of the sandbox, made with
// its missing parents; see PUT /v1/sandboxes/{ref}/files/tar.
func (c *Client) UploadTar(ctx context.Context, ref, dir string, r io.Reader) (*api.TreeSummary, error) {
	var out api.TreeSummary
	req := request{method: http.MethodPut, path: sandboxPath(ref, "files", "tar"), query: filesQuery(dir), body: r, size: readerSize(r),
		header: http.Header{"Content-Type": {"application/x-tar"}}}
	if err := c.do(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UploadDir copies the local directory local into the sandbox as the directory dir
// (made with its missing parents; what is there already is overwritten file by file).
// Modes and symbolic links are kept; links are never followed, so nothing outside
// local is read. Sockets, FIFOs and devices are skipped.
func (c *Client) UploadDir(ctx context.Context, ref, local, dir string, opts *TreeOptions) (*api.TreeSummary, error) {
	root, err := os.OpenRoot(local)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, 256<<10) // whole buffers through the pipe, not each header
		_, err := tartree.Pack(root, bw, opts.progress(), nil)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		packed <- err
	}()
	sum, err := c.UploadTar(ctx, ref, dir, pr)
	pr.CloseWithError(errUploadEnded)
	// A pipe closed under the packing is the upload's end (the daemon answered, maybe
	// with a refusal, before reading everything); another failure is the cause of a
	// stream the daemon saw cut short.
	if perr := <-packed; perr != nil && !errors.Is(perr, errUploadEnded) && !errors.Is(perr, io.ErrClosedPipe) {
		return nil, fmt.Errorf("reading %s: %w", local, perr)
	}
	return sum, err
}

var errUploadEnded = errors.New("the upload ended")

// DownloadTar writes the tree under the directory dir of the sandbox to w as a tar
// stream, and returns its length. The stream is the sandbox's: check every entry
// before unpacking it, or use DownloadDir, which does.
func (c *Client) DownloadTar(ctx context.Context, ref, dir string, w io.Writer) (int64, error) {
	return c.copyBody(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files", "tar"), query: filesQuery(dir)}, w)
}

// DownloadDir copies the directory dir of the sandbox to the local directory local
// (made if missing; what is there already is overwritten file by file) and returns
// what it held. The archive is the sandbox's, so it is unpacked as hostile input:
// nothing is written outside local, no link is ever followed (a symbolic link is made
// as a link, with its target as the sandbox gave it), setuid and setgid bits are
// dropped, and an archive with an absolute name, a ".." element, a path through a
// link, a device node or FIFO, a hard link out, or past the limits of opts is refused
// (ErrArchiveRefused) at that entry. On a refusal or any failure a local directory
// that DownloadDir made is removed again.
func (c *Client) DownloadDir(ctx context.Context, ref, dir, local string, opts *TreeOptions) (sum *api.TreeSummary, retErr error) {
	made := false
	if _, err := os.Lstat(local); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(local, 0o755); err != nil {
			return nil, err
		}
		made = true
	}
	defer func() {
		if retErr != nil && made {
			os.RemoveAll(local)
		}
	}()
	root, err := os.OpenRoot(local)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	resp, err := c.send(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "files", "tar"), query: filesQuery(dir)})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	xo := tartree.Options{Progress: opts.progress()}
	if opts != nil {
		xo.Limits = tartree.Limits{MaxEntries: opts.MaxEntries, MaxBytes: opts.MaxBytes}
	}
	got, err := tartree.Extract(root, bufio.NewReaderSize(resp.Body, 256<<10), xo)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s:%s to %s: %w", ref, dir, local, err)
	}
	return &api.TreeSummary{Path: local, Files: got.Files, Dirs: got.Dirs, Links: got.Links, Bytes: got.Bytes}, nil
}
