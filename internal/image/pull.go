package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/failpoint"
)

// PullRequest says what to pull and under which name.
type PullRequest struct {
	// Ref is a registry reference as a user types it: "python:3.12-slim",
	// "ghcr.io/o/r:tag", "127.0.0.1:5000/x@sha256:...".
	Ref string
	// Name is the local name; "" names the image Ref as given.
	Name string
	// Public and Users are as in ImportRequest.
	Public bool
	Users  Users
	// Username and Password are the credentials of this pull; when both are empty, the
	// node's docker config.json (authn.DefaultKeychain) gives them.
	Username, Password string
	// Insecure allows a registry that speaks plain http, or is on a loopback or private
	// address (registries the node's administrator lists; loopback test registries).
	// Without it a pull dials public addresses only, and never cloud metadata ones.
	Insecure bool
}

// String keeps the password out of logs.
func (r PullRequest) String() string {
	return fmt.Sprintf("{Ref:%q Name:%q Public:%v Username:%q Password:%s Insecure:%v}",
		r.Ref, r.Name, r.Public, r.Username, redacted(r.Password), r.Insecure)
}

// GoString keeps the password out of %#v.
func (r PullRequest) GoString() string { return "image.PullRequest" + r.String() }

func redacted(s string) string {
	if s == "" {
		return `""`
	}
	return "<redacted>"
}

// PullEvent is one step of a pull, for progress bars and API event streams.
type PullEvent struct {
	Ref    string // the canonical reference being pulled
	Digest string // the layer's blob digest ("" for an image-level event)
	// Layer is the 1-based index of the layer and Layers how many the image has (0 for
	// image-level events).
	Layer, Layers int
	// Status is "resolving" (the image), "downloading", "cached" (already unpacked,
	// reused), "verifying" (all bytes read; digests being settled), "done" (a layer),
	// or "complete" (the image).
	Status string
	// Done and Total count the bytes of the layer's blob, or of all layers' blobs for
	// "complete".
	Done, Total int64
}

// Pull resolves req.Ref on its registry (a multi-arch index to the linux/runtime.GOARCH
// manifest), fetches the layers it does not have (several at once), verifies each
// blob's digest and diff id while it streams, unpacks each once with the same guards and
// limits as Import, and names the image for sc. It reports progress to fn (may be nil),
// from one goroutine at a time.
//
// A layer is reused without downloading when an image sc sees has it, or a pull of
// sc's that did not finish unpacked it; or, when another owner's install unpacked it,
// once the registry confirms (a HEAD of the blob, with this pull's credentials) that
// sc may read the blob, which was verified to unpack to that layer when it was
// downloaded from this same registry. Layers a failed or cancelled pull unpacked are
// kept for 24 hours (and count in the owner's quota meanwhile), so a retry downloads
// only the rest; a blob whose download broke off is downloaded again from its start.
// A failed pull leaves no record and no ref, and no partly unpacked layer.
func (s *Store) Pull(ctx context.Context, sc Scope, req PullRequest, fn func(PullEvent)) (*Image, error) {
	ref, err := parseReference(req.Ref, req.Insecure)
	if err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = req.Ref
		if validName(name) != nil {
			return nil, errdefs.Invalid("the reference %q is not a valid local image name (lowercase, at most 255 characters); give the image a name", req.Ref)
		}
	}
	if err := admit(sc, req.Public, name, "pull"); err != nil {
		return nil, err
	}
	reg, err := newRegistry(ref, req, s.Limits().RegistryTimeout)
	if err != nil {
		return nil, err
	}
	defer reg.close()
	p := &pull{s: s, sc: sc, reg: reg, fn: fn}
	img, err := p.run(ctx, ImportRequest{Name: name, Public: req.Public, Users: req.Users})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, wrapErr(err, "pull %s", ref.Name())
	}
	return img, nil
}

// pull is one Pull in progress.
type pull struct {
	s   *Store
	sc  Scope
	reg *registryClient
	mu  sync.Mutex // held to call fn
	fn  func(PullEvent)
}

func (p *pull) emit(ev PullEvent) {
	if p.fn == nil {
		return
	}
	ev.Ref = p.reg.ref.Name()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fn(ev)
}

func (p *pull) run(ctx context.Context, req ImportRequest) (*Image, error) {
	p.emit(PullEvent{Status: "resolving"})
	pl, err := p.reg.resolve(ctx)
	if err != nil {
		failpoint.Hit("image.pull-failed")
		return nil, err
	}
	pend := p.s.openPending(p.sc.Owner, pl.reference)
	open := func(*installer) (*plan, func(), error) { return pl, func() {}, nil }
	fetch := func(ctx context.Context, in *installer, pl *plan) ([]string, error) {
		in.unpacked = func(diffID, blob, dir string) error { return pend.add(diffID, blob, dirSize(dir)) }
		return p.layers(ctx, in, pl)
	}
	img, err := p.s.install(ctx, p.sc, req, open, fetch)
	if err != nil {
		return nil, err
	}
	// The image keeps the layers now. Should the record stay, it keeps them a day more.
	_ = pend.remove()
	var total int64
	for _, l := range pl.layers {
		total += l.size
	}
	p.emit(PullEvent{Status: "complete", Done: total, Total: total})
	return img, nil
}

// layers makes sure every layer of pl is unpacked, maxParallelLayers at a time, and
// returns their diff ids, lowest first. The first failure stops the others.
func (p *pull) layers(ctx context.Context, in *installer, pl *plan) ([]string, error) {
	ids := make([]string, len(pl.layers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallelLayers)
	for i, l := range pl.layers {
		g.Go(func() error {
			id, err := p.layer(gctx, in, i, len(pl.layers), l)
			if err != nil {
				return wrapErr(err, "layer %d of %d (%s)", i+1, len(pl.layers), l.blob)
			}
			ids[i] = id
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return ids, nil
}

// layer makes sure the i-th layer l is unpacked: reused when sc may have it, else
// downloaded, verified, unpacked, and recorded as pending (in.unpacked) until the image
// is committed.
func (p *pull) layer(ctx context.Context, in *installer, i, n int, l layerSource) (string, error) {
	ev := PullEvent{Digest: l.blob, Layer: i + 1, Layers: n, Total: l.size}
	// A layer is reused only with its blob when the store keeps blobs for exports.
	if (in.have(l.diffID) || p.reusable(ctx, l)) && (!in.keeps(l) || p.s.hasBlobData(l.blob)) {
		ev.Status, ev.Done = "cached", l.size
		p.emit(ev)
		return l.diffID, nil
	}
	ev.Status = "downloading"
	p.emit(ev)
	l.open = func() (io.ReadCloser, int64, error) {
		rc, err := p.reg.openBlob(ctx, l.blob)
		if err != nil {
			return nil, 0, err
		}
		return &reportingReader{r: rc, c: rc, p: p, ev: ev}, l.size, nil
	}
	id, err := in.fetchLayer(ctx, l, &progress{})
	if err != nil {
		return "", err
	}
	ev.Status, ev.Done = "done", l.size
	p.emit(ev)
	return id, nil
}

// reusable reports whether the layer l, unpacked by an install of another owner, may
// be reused for this pull: its blob was verified to unpack to l's diff id when it was
// downloaded from this same registry, and the registry confirms now, to this pull's
// credentials, that it has the blob. Naming a digest is not having the data, and a
// registry the puller controls cannot vouch for a blob it never served.
func (p *pull) reusable(ctx context.Context, l layerSource) bool {
	if _, err := os.Lstat(p.s.path("layers", hexOf(l.diffID))); err != nil {
		return false
	}
	return p.s.blobNoted(l.blob, l.diffID, p.reg.host) && p.reg.hasBlob(ctx, l.blob, l.size)
}

// reportingReader reports a layer's download: every MiB, and "verifying" once all its
// bytes are in.
type reportingReader struct {
	r         io.Reader
	c         io.Closer
	p         *pull
	ev        PullEvent
	shown     int64
	verifying bool
}

func (r *reportingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.ev.Done += int64(n)
	if r.ev.Done-r.shown >= 1<<20 || (r.ev.Done >= r.ev.Total && r.shown < r.ev.Total) {
		r.shown = r.ev.Done
		r.p.emit(r.ev)
	}
	if r.ev.Done >= r.ev.Total && !r.verifying {
		r.verifying = true
		ev := r.ev
		ev.Status = "verifying"
		r.p.emit(ev)
	}
	return n, err
}

func (r *reportingReader) Close() error { return r.c.Close() }
