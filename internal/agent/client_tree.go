package agent

import (
	"context"
	"fmt"
	"io"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// UploadTree unpacks the tar stream r into the directory path (made with its missing
// parents), within lim, and returns what it held.
func (c *Client) UploadTree(ctx context.Context, path string, lim agentproto.TarLimits, r io.Reader) (*agentproto.TreeResult, error) {
	var res agentproto.TreeResult
	sent, err := c.stream(ctx, &agentproto.Request{Op: agentproto.OpFileUntar, Path: path, Tar: &lim}, r, &res)
	if err != nil {
		return nil, err
	}
	if res.Files < 0 || res.Dirs < 0 || res.Links < 0 || res.Bytes < 0 || res.Bytes > sent {
		return nil, fmt.Errorf("%w: untar %s: %+v from a stream of %d bytes", agentproto.ErrBadReply, path, res, sent)
	}
	return &res, nil
}

// DownloadTree writes the tree under the directory path to w as a tar stream. What the
// agent sends is the sandbox's: whoever unpacks it must check every entry.
func (c *Client) DownloadTree(ctx context.Context, path string, w io.Writer) (int64, error) {
	return c.download(ctx, &agentproto.Request{Op: agentproto.OpFileTar, Path: path}, w)
}
