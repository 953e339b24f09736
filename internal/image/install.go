package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/failpoint"
)

// admit checks what every import and pull must be before it does anything: an owner,
// publishing only by an administrator, and a valid name (when one is given).
func admit(sc Scope, public bool, name, verb string) error {
	if sc.Owner == "" {
		return errdefs.Invalid("an image %s needs an owner", verb)
	}
	if public && !sc.Admin {
		return publicOnly("publish", name)
	}
	if name != "" {
		return validName(name)
	}
	return nil
}

// wrapErr says what failed before err's message, keeping its class and details: the
// client sees which image and which layer an error is about.
func wrapErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	var e *errdefs.Error
	if errors.As(err, &e) {
		return &errdefs.Error{Class: e.Class, Msg: what + ": " + e.Msg, Details: e.Details, Cause: e.Cause}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// installer is one import or pull between its plan and its commit. It holds gc.lock
// shared for its whole life, so no layer it may reuse is collected under it. Its
// methods are safe for concurrent use.
type installer struct {
	s     *Store
	sc    Scope
	lim   Limits
	work  string          // a directory of its own under tmp/, removed when it ends
	known map[string]bool // layers sc may reuse: those of the images it sees and of its pending pulls
	bud   *budget
	seq   atomic.Int64
	mu    sync.Mutex
	blobs map[string]string // diff id -> the digest of the blob kept for it
	// unpacked, when set, is told of each layer fetchLayer unpacked and checked, with
	// the directory it is in, before the layer or its blob is visible in the store: a
	// pull records it as pending there, so a crash after the layer appears keeps it.
	unpacked func(diffID, blob, dir string) error
}

// blobFor returns the digest of the blob the store keeps for the layer diffID and this
// install, or "" when it keeps none.
func (in *installer) blobFor(l layerSource, diffID string) string {
	in.mu.Lock()
	b := in.blobs[diffID]
	in.mu.Unlock()
	if b == "" {
		b = l.blob
	}
	if !in.s.hasBlobData(b) {
		return ""
	}
	return b
}

func (in *installer) noteKept(diffID, blob string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.blobs == nil {
		in.blobs = map[string]string{}
	}
	in.blobs[diffID] = blob
}

// install is what Import and Pull share. Under gc.lock shared and in a work directory
// of its own, open plans the image, fetch makes sure the plan's layers are unpacked
// (through in.fetchLayer, or reusing what in.have) and returns their diff ids, lowest
// first, and commit names the image req.Name (when "", the name the plan gives it) for
// sc. After a failure, or once commit dropped the image the name pointed to, it
// collects the layers that no record and no pending pull keeps.
func (s *Store) install(ctx context.Context, sc Scope, req ImportRequest,
	open func(in *installer) (*plan, func(), error),
	fetch func(ctx context.Context, in *installer, pl *plan) ([]string, error),
) (_ *Image, retErr error) {
	lim := s.Limits()
	// Held shared for the whole install: no layer is deleted while one may be about to use it.
	unlockGC, err := s.lock("gc.lock", unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(s.path("tmp"), "import-")
	if err != nil {
		unlockGC()
		return nil, err
	}
	dropped := false // commit deleted the record of the image the name pointed to
	defer func() {
		os.RemoveAll(work)
		unlockGC()
		if retErr != nil || dropped {
			// Layers this install added (or the dropped image had) are unreferenced now,
			// unless a pending pull keeps them; collect them unless another install runs
			// (which may be about to use them; a later collection gets them).
			if unlock, err := s.lock("meta.lock", unix.LOCK_EX); err == nil {
				s.collectLocked()
				unlock()
			}
		}
	}()
	in := &installer{s: s, sc: sc, lim: lim, work: work}
	if in.known, in.bud, err = s.importState(sc, lim); err != nil {
		return nil, err
	}
	pl, closeSrc, err := open(in)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	name := req.Name
	if name == "" {
		if pl.tag == "" {
			return nil, errdefs.Invalid("an image name is required: the archive does not name its image")
		}
		if err := validName(pl.tag); err != nil {
			return nil, errdefs.Invalid("the archive names its image %q, which is not a valid name; give one", pl.tag)
		}
		name = pl.tag
	}
	ids, err := fetch(ctx, in, pl)
	if err != nil {
		failpoint.Hit("image.install-failed") // before the cleanup below runs
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	img := &Image{Digest: pl.digest, Reference: pl.reference, Layers: ids, Config: pl.config, Created: time.Now().UTC()}
	for _, id := range ids {
		n := dirSize(s.path("layers", hexOf(id)))
		img.Size += n
		img.LayerSizes = append(img.LayerSizes, n)
	}
	if img.Digest == "" {
		img.Digest = img.Layers[0]
	}
	if err := in.keepSources(img, pl, ids); err != nil {
		return nil, err
	}
	img, dropped, err = s.commit(sc, img, name, req, lim)
	return img, err
}

// importState returns the layers sc may reuse (those of the images it sees, and those
// its own pending pulls unpacked) and the unpack budget of its install: the node's
// limit, or what sc's quota leaves if less.
func (s *Store) importState(sc Scope, lim Limits) (map[string]bool, *budget, error) {
	t, err := s.readRefs()
	if err != nil {
		return nil, nil, err
	}
	known := map[string]bool{}
	for d := range t.visibleDigests(sc) {
		img, err := s.readRecord(d)
		if err != nil {
			continue // removed meanwhile: nothing to reuse
		}
		for _, l := range img.Layers {
			known[l] = true
		}
	}
	pending, _, err := s.pendings()
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pending {
		if p.Owner == sc.Owner {
			for _, l := range p.Layers {
				known[l.DiffID] = true
			}
		}
	}
	bud := &budget{left: lim.Unpacked, limit: lim.Unpacked, owner: sc.Owner, setuid: lim.Setuid, devices: lim.Devices}
	if !sc.Admin {
		used, err := s.usage(t, sc.Owner, "", nil)
		if err != nil {
			return nil, nil, err
		}
		if left := lim.Quota - used; left < bud.left {
			bud.left, bud.limit, bud.quota, bud.used = max(left, 0), max(left, 0), true, used
			if left <= 0 {
				return nil, nil, quotaError(sc.Owner, used, lim.Quota)
			}
		}
	}
	return known, bud, nil
}

// commit records img (unless its digest is already known) and points sc's name at it,
// within sc's quota. The image the name pointed to before is deleted when nothing else
// names it and req.Users says no sandbox runs on it (dropped reports it; the caller
// collects its layers); otherwise sc keeps it by digest.
func (s *Store) commit(sc Scope, img *Image, name string, req ImportRequest, lim Limits) (_ *Image, dropped bool, _ error) {
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	t, err := s.readRefs()
	if err != nil {
		return nil, false, err
	}
	if !sc.Admin {
		used, err := s.usage(t, sc.Owner, img.Digest, img.Layers)
		if err != nil {
			return nil, false, err
		}
		if used+img.Size > lim.Quota {
			return nil, false, quotaError(sc.Owner, used, lim.Quota)
		}
	}
	r := ref{Owner: sc.Owner, Name: name, Digest: img.Digest, Public: req.Public, Reference: img.Reference}
	created := false
	if old, err := s.readRecord(img.Digest); err == nil {
		if len(old.Blobs) == 0 && len(img.Blobs) > 0 {
			// Stored before without its blobs: the record keeps them now.
			old.Blobs, old.Manifest, old.ConfigDigest, old.Format = img.Blobs, img.Manifest, img.ConfigDigest, img.Format
			if err := s.rewriteRecord(old); err != nil {
				return nil, false, err
			}
		}
		img = old
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, false, err
	} else if err := s.writeRecord(img); err != nil {
		return nil, false, err
	} else {
		created = true
	}
	var prev ref
	// The owner's unnamed ref to this image, if any, is now its name.
	rest := &refTable{}
	for _, o := range t.Refs {
		if o.Name == "" && !o.Public && o.Owner == sc.Owner && o.Digest == img.Digest {
			continue
		}
		rest.Refs = append(rest.Refs, o)
	}
	t = rest
	if i := t.find(sc.Owner, name, req.Public); i >= 0 {
		prev = t.Refs[i]
		t.Refs[i] = r
	} else {
		t.Refs = append(t.Refs, r)
	}
	sweep := false
	if prev.Digest != "" && prev.Digest != img.Digest && !t.pointsAt(prev.Digest) {
		if req.Users != nil && len(req.Users(prev.Digest)) == 0 {
			sweep = true
		} else {
			t.Refs = append(t.Refs, ref{Owner: sc.Owner, Digest: prev.Digest, Reference: prev.Reference})
		}
	}
	if err := s.writeRefs(t); err != nil {
		if created {
			os.Remove(s.recordPath(img.Digest))
		}
		return nil, false, err
	}
	if sweep {
		dropped = os.Remove(s.recordPath(prev.Digest)) == nil
	}
	img.setRef(r)
	return img, dropped, nil
}

// keeps says whether the store keeps the blob of layer l: always for an import, for a
// pull when the limits say so.
func (in *installer) keeps(l layerSource) bool { return l.registry == "" || in.lim.KeepPulledBlobs }

// keepSources records in img the blobs the store keeps for it (its layers', manifest's
// and config's), when it keeps every one; an image without them cannot be exported.
func (in *installer) keepSources(img *Image, pl *plan, ids []string) error {
	img.Format = pl.format
	blobs := make([]string, len(ids))
	for i, id := range ids {
		if blobs[i] = in.blobFor(pl.layers[i], id); blobs[i] == "" {
			return nil
		}
	}
	for _, raw := range []struct {
		b   []byte
		out *string
	}{{pl.manifest, &img.Manifest}, {pl.rawConfig, &img.ConfigDigest}} {
		if raw.b == nil {
			continue
		}
		d, err := in.s.keepMetadata(raw.b)
		if err != nil {
			return err
		}
		*raw.out = d
	}
	img.Blobs = blobs
	return nil
}

// have reports whether the layer diffID is unpacked and sc may reuse it as it is.
func (in *installer) have(diffID string) bool {
	if diffID == "" || !in.known[diffID] {
		return false
	}
	_, err := os.Lstat(in.s.path("layers", hexOf(diffID)))
	return err == nil
}

// fetchLayer makes sure the layer l is unpacked under layers/ and returns its diff id.
// It unpacks into a new directory under the work dir, checks the digests of what it
// read, and renames the result into place; if another install got there first, the
// existing directory is kept. It reads no more than l.size bytes of the blob.
//
// An existing layer is reused only when in.have it (an image sc sees, or a pull of
// sc's, has it); any other layer is unpacked and checked, so a layer's data is never
// granted for naming its digest. The budget and limits bound what it may unpack. A
// blob pulled from a registry is noted once verified (see noteBlob).
func (in *installer) fetchLayer(ctx context.Context, l layerSource, pr *progress) (string, error) {
	keep := in.keeps(l)
	if in.have(l.diffID) && (!keep || in.s.hasBlobData(l.blob)) {
		pr.add(l.size)
		return l.diffID, nil
	}
	rc, _, err := l.open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	seq := in.seq.Add(1)
	tmp := filepath.Join(in.work, fmt.Sprintf("layer-%d", seq))
	blobHash, diffHash := sha256.New(), sha256.New()
	if l.verified {
		blobHash = nil // the source checks it
	}
	// The blob itself is kept too, for exports, when it is to be: written as it streams.
	var (
		blobTmp string
		bf      *os.File
		bw      *bufio.Writer
		blobSrc io.Reader = rc
	)
	if keep {
		blobTmp = filepath.Join(in.work, fmt.Sprintf("blob-%d", seq))
		if bf, err = os.OpenFile(blobTmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return "", err
		}
		defer bf.Close()
		bw = bufio.NewWriterSize(bf, 1<<20)
		blobSrc = io.TeeReader(rc, bw)
	}
	src := &countingReader{ctx: ctx, r: blobSrc, pr: pr, max: l.size}
	id, blob, err := in.checkLayer(ctx, l, src, blobHash, diffHash, tmp)
	if err != nil {
		// The crash tests stop here: the layer's work is half done on disk.
		failpoint.Hit("image.layer-failed")
		return "", err
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return "", err
		}
	}
	// One sync for the layer and its blob, before either is visible under its digest.
	if err := syncDir(tmp); err != nil {
		return "", err
	}
	if in.unpacked != nil {
		if err := in.unpacked(id, blob, tmp); err != nil {
			return "", err
		}
	}
	if keep {
		if err := in.s.keepBlob(blobTmp, blob); err != nil {
			return "", err
		}
		in.noteKept(id, blob)
	}
	err = os.Rename(tmp, in.s.path("layers", hexOf(id)))
	if err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTEMPTY) {
		return "", err
	}
	if l.registry != "" && l.blob != "" {
		// Only an optimisation for later pulls: without the note they download the blob.
		_ = in.s.noteBlob(l.blob, id, l.registry)
	}
	return id, nil
}

// checkLayer unpacks the layer l from src into tmp and returns its diff id and its
// blob's digest, once both are what l says.
func (in *installer) checkLayer(ctx context.Context, l layerSource, src *countingReader, blobHash, diffHash hash.Hash, tmp string) (id, blob string, _ error) {
	if err := in.unpackBlob(ctx, src, blobHash, diffHash, tmp); err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		if src.err == nil {
			return "", "", err
		}
		// The blob stream failed, which is the cause, unless it gave all the bytes the
		// manifest says and they are not the blob it names.
		if blobHash != nil && l.blob != "" && src.n == l.size {
			if got := sumOf(blobHash); got != l.blob {
				return "", "", blobMismatch(got, l.blob)
			}
		}
		return "", "", src.err
	}
	blob = l.blob
	if blobHash != nil {
		if blob = sumOf(blobHash); l.blob != "" && blob != l.blob {
			return "", "", blobMismatch(blob, l.blob)
		}
	}
	id = sumOf(diffHash)
	if l.diffID != "" && id != l.diffID {
		return "", "", errdefs.Invalid("layer has diff id %s, the image config says %s", id, l.diffID)
	}
	return id, blob, nil
}

// unpackBlob unpacks the layer blob src into tmp, hashing the blob into blobHash and
// the tar stream into diffHash, and reads the blob to its end. blobHash is nil when the
// source checks the blob itself.
func (in *installer) unpackBlob(ctx context.Context, src *countingReader, blobHash, diffHash hash.Hash, tmp string) error {
	var in0 io.Reader = src
	if blobHash != nil {
		in0 = io.TeeReader(src, blobHash)
	}
	br := bufio.NewReaderSize(in0, 1<<20)
	stream, err := decompress(br)
	if err != nil {
		return err
	}
	if c, ok := stream.(io.Closer); ok {
		defer c.Close() // a zstd decoder's resources
	}
	tarStream := io.TeeReader(&inflateGuard{r: stream, in: &src.n, max: in.lim.Unpacked, ratio: in.lim.Ratio, what: "a layer"}, diffHash)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := unpackLayer(ctx, tarStream, tmp, in.bud); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tarStream); err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			return err
		}
		return errdefs.Invalid("layer data is corrupt: %v", err)
	}
	_, err = io.Copy(io.Discard, br)
	return err
}

func blobMismatch(got, want string) error {
	return errdefs.Invalid("layer blob has digest %s, the manifest says %s", got, want)
}

func sumOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// decompress returns the tar stream in r, gunzipping it when it is gzip-compressed.
func decompress(r *bufio.Reader) (io.Reader, error) {
	magic, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, errdefs.Invalid("layer is not valid gzip: %v", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, zstdMagic):
		// One goroutine, and a window of at most 64 MiB, whatever the frame asks for.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, errdefs.Invalid("layer is not valid zstd: %v", err)
		}
		return zr.IOReadCloser(), nil
	}
	return r, nil
}

// syncDir flushes the file system holding dir, so a renamed layer is complete on disk.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// progress throttles reports to one per MiB.
type progress struct {
	fn                 Progress
	phase              string
	done, total, shown int64
}

func (p *progress) add(n int64) {
	p.done += n
	if p.done-p.shown >= 1<<20 {
		p.report()
	}
}

func (p *progress) report() {
	if p.fn != nil {
		p.fn(p.phase, p.done, p.total)
	}
	p.shown = p.done
}

// countingReader counts and reports bytes read, stops when ctx ends, refuses more than
// max bytes (when max > 0), and keeps the first error its source gave (err).
type countingReader struct {
	ctx context.Context
	r   io.Reader
	pr  *progress
	max int64
	n   int64
	err error
}

func (c *countingReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(b)
	c.n += int64(n)
	c.pr.add(int64(n))
	if c.max > 0 && c.n > c.max {
		err = errdefs.Invalid("the layer blob is larger than the %d bytes the image says it has", c.max)
	}
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}
