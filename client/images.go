package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Images lists the images the caller sees: its own private images and the public ones,
// the built-in host image included.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var out api.ImageList
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/images"}, &out); err != nil {
		return nil, err
	}
	return out.Images, nil
}

// RemoveImage deletes one of the caller's images; it fails with failed_precondition while
// one of the caller's sandboxes uses it, and with permission_denied for a public image
// unless the caller is an administrator.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/images/" + url.PathEscape(ref)}, nil)
}

// ImportImage uploads an image archive of size bytes (-1 if unknown) read from r and
// stores it as name. progress, if not nil, sees phase "upload" events as the body is sent
// (Done bytes of Total; Total is 0 when size is unknown), then the daemon's own progress
// events; it is called from one goroutine at a time and never after ImportImage returns.
//
// The image is the caller's private image: a name another owner uses is not touched.
func (c *Client) ImportImage(ctx context.Context, name string, r io.Reader, size int64, progress func(api.ImportEvent)) (*api.Image, error) {
	return c.importImage(ctx, url.Values{"name": {name}}, r, size, progress)
}

// ImportPublicImage is ImportImage for a public image, one every owner sees and uses.
// Only the node's administrators (over the unix socket) may publish one.
func (c *Client) ImportPublicImage(ctx context.Context, name string, r io.Reader, size int64, progress func(api.ImportEvent)) (*api.Image, error) {
	return c.importImage(ctx, url.Values{"name": {name}, "visibility": {api.VisibilityPublic}}, r, size, progress)
}

func (c *Client) importImage(ctx context.Context, query url.Values, r io.Reader, size int64, progress func(api.ImportEvent)) (*api.Image, error) {
	if size < 0 {
		size = -1
	}
	var p *importProgress
	body := r
	if progress != nil {
		p = &importProgress{fn: progress, total: max(size, 0)}
		defer p.stop()
		body = &countingReader{r: r, p: p}
	}
	req := request{method: http.MethodPost, path: "/v1/images", query: query, body: body, size: size}
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var follow func(api.ImportEvent)
	if p != nil {
		follow = p.event
	}
	return readResult(ctx, resp.Body, "image import", func(ev api.ImportEvent) (*api.Image, *api.Error) { return ev.Image, ev.Error }, follow)
}

// readResult follows the NDJSON events that answer an image import or pull, or a
// create that pulls (what), handing each to progress (if set) until one carries the
// result or an error.
func readResult[E, R any](ctx context.Context, r io.Reader, what string, result func(E) (*R, *api.Error), progress func(E)) (*R, error) {
	dec := json.NewDecoder(r)
	for {
		var ev E
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: %w: %w", what, errNoResult, io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("%s: read stream: %w", what, err)
		}
		switch img, e := result(ev); {
		case e != nil:
			return nil, streamError(e)
		case img != nil:
			return img, nil
		case progress != nil:
			progress(ev)
		}
	}
}

// importProgress serialises the callbacks of the upload (sent from the transport's
// goroutine) and of the daemon's events, and stops them when the import returns.
type importProgress struct {
	mu      sync.Mutex
	fn      func(api.ImportEvent)
	total   int64
	done    int64
	stopped bool
}

func (p *importProgress) event(ev api.ImportEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.fn(ev)
	}
}

func (p *importProgress) sent(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	if !p.stopped {
		p.fn(api.ImportEvent{Phase: "upload", Done: p.done, Total: p.total})
	}
}

func (p *importProgress) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// countingReader reports every read to its progress.
type countingReader struct {
	r io.Reader
	p *importProgress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.p.sent(n)
	}
	return n, err
}

// PullImage pulls an image from its registry into the daemon's store; progress, if not
// nil, sees each layer's steps as the daemon reports them.
func (c *Client) PullImage(ctx context.Context, req api.PullRequest, progress func(api.PullEvent)) (*api.Image, error) {
	resp, err := c.send(ctx, request{method: http.MethodPost, path: "/v1/images/pull", in: req})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readResult(ctx, resp.Body, "image pull", func(ev api.PullEvent) (*api.Image, *api.Error) { return ev.Image, ev.Error }, progress)
}

// Image returns one image with its configuration, layers and the caller's sandboxes on it.
func (c *Client) Image(ctx context.Context, ref string) (*api.Image, error) {
	var out api.Image
	return &out, c.do(ctx, request{method: http.MethodGet, path: "/v1/images/" + url.PathEscape(ref)}, &out)
}

// PruneImages removes the caller's images that no sandbox runs on.
func (c *Client) PruneImages(ctx context.Context) (*api.PruneResult, error) {
	var out api.PruneResult
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/images/prune"}, &out)
}

// RegistryLogin keeps the caller's credentials for a registry on the node, sealed like
// a secret; the caller's pulls from there use them.
func (c *Client) RegistryLogin(ctx context.Context, req api.RegistryLoginRequest) (*api.RegistryLogin, error) {
	var out api.RegistryLogin
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/registries/login", in: req}, &out)
}

// RegistryLogout forgets the caller's credentials for a registry.
func (c *Client) RegistryLogout(ctx context.Context, registry string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/registries/" + url.PathEscape(registry)}, nil)
}

// ExportImage writes the image ref to w as a tar archive: an OCI image layout that
// `docker load` also reads (for pulled images and OCI imports), a `docker save`
// archive, or the plain rootfs tarball it was imported from. Importing it gives the
// same digest. It returns the bytes written; an export that fails part way returns an
// error, and what w holds then is not an image.
func (c *Client) ExportImage(ctx context.Context, ref string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/images/" + url.PathEscape(ref) + "/export"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		return n, fmt.Errorf("%w: export of %s broke off after %d bytes: %w", errdefs.ErrUnavailable, ref, n, err)
	}
	if msg := resp.Trailer.Get("Airlock-Error"); msg != "" {
		return n, &Error{Status: http.StatusConflict, Code: "failed_precondition", Message: msg}
	}
	return n, nil
}
