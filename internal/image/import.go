package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9._/:-]*[a-z0-9])?$`) })

// validName checks an image name: like a Docker reference, lowercase.
func validName(name string) error {
	if len(name) > 255 || !nameRE().MatchString(name) {
		return errdefs.Invalid("invalid image name %q: use 1 to 255 lowercase letters, digits, '.', '_', '-', '/' and ':', starting and ending with a letter or digit", name)
	}
	if name == HostName {
		return errdefs.Invalid("the image name %q is reserved for the built-in image", name)
	}
	if strings.HasPrefix(name, "sha256:") || (len(name) >= 12 && isHex(name)) {
		return errdefs.Invalid("invalid image name %q: it looks like a digest", name)
	}
	return nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// ImportRequest says what to import and under which name.
type ImportRequest struct {
	// Archive is the path of the image archive.
	Archive string
	// Name is the name to give the image; "" takes the name the archive gives it.
	Name string
	// Public makes the image every owner's (administrators only); otherwise it is the
	// private image of the caller.
	Public bool
	// Users, if set, tells whether an image the name pointed to is still run by a
	// sandbox; one nobody runs or names any more is deleted. Without it, or while one
	// does, the caller keeps it by digest.
	Users Users
}

// Import unpacks the image archive req.Archive (a plain rootfs tarball, optionally
// gzip-compressed; a `docker save` archive; or an OCI image layout, as a directory or a
// tar) and names it req.Name for sc, replacing the image sc's name pointed to; another
// owner's image of that name is never touched. It holds the import to the store's
// limits and to sc's quota, and it reuses an unpacked layer only when an image sc sees
// already has it: naming a digest is not having the data. A failed import leaves
// nothing behind.
func (s *Store) Import(ctx context.Context, sc Scope, req ImportRequest, p Progress) (_ *Image, retErr error) {
	name := req.Name
	if sc.Owner == "" {
		return nil, errdefs.Invalid("an image import needs an owner")
	}
	if req.Public && !sc.Admin {
		return nil, publicOnly("publish", name)
	}
	if name != "" {
		if err := validName(name); err != nil {
			return nil, err
		}
	}
	lim := s.Limits()
	// Held shared for the whole import: no layer is deleted while one may be about to use it.
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
			// Layers this import added (or the dropped image had) are unreferenced now;
			// collect them unless another import runs (which may be about to use them; a
			// later collection gets them).
			if unlock, err := s.lock("meta.lock", unix.LOCK_EX); err == nil {
				s.collectLocked()
				unlock()
			}
		}
	}()
	known, bud, err := s.importState(sc, lim)
	if err != nil {
		return nil, err
	}

	pr := &progress{fn: p}
	pl, closeSrc, err := inspect(ctx, req.Archive, name, work, lim, pr)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	if name == "" {
		if pl.tag == "" {
			return nil, errdefs.Invalid("an image name is required: the archive does not name its image")
		}
		if err := validName(pl.tag); err != nil {
			return nil, errdefs.Invalid("the archive names its image %q, which is not a valid name; give one", pl.tag)
		}
		name = pl.tag
	}

	pr.phase, pr.done, pr.total = "unpack", 0, 0
	for _, l := range pl.layers {
		pr.total += l.size
	}
	pr.report()
	img := &Image{Digest: pl.digest, Config: pl.config, Created: time.Now().UTC()}
	for i, l := range pl.layers {
		id, err := s.fetchLayer(ctx, l, filepath.Join(work, fmt.Sprintf("layer-%d", i)), known, bud, lim, pr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("layer %d of %d: %w", i+1, len(pl.layers), err)
		}
		img.Layers = append(img.Layers, id)
		img.Size += dirSize(s.path("layers", hexOf(id)))
	}
	pr.report()
	if img.Digest == "" {
		img.Digest = img.Layers[0]
	}
	img, dropped, err = s.commit(sc, img, name, req, lim)
	return img, err
}

// importState returns the layers sc may reuse (those of the images it sees) and the
// unpack budget of its import: the node's limit, or what sc's quota leaves if less.
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
	bud := &budget{left: lim.Unpacked, limit: lim.Unpacked, owner: sc.Owner}
	if !sc.Admin {
		used, err := s.usage(t, sc.Owner, "")
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
		used, err := s.usage(t, sc.Owner, img.Digest)
		if err != nil {
			return nil, false, err
		}
		if used+img.Size > lim.Quota {
			return nil, false, quotaError(sc.Owner, used, lim.Quota)
		}
	}
	created := false
	if old, err := s.readRecord(img.Digest); err == nil {
		img = old
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, false, err
	} else if err := s.writeRecord(img); err != nil {
		return nil, false, err
	} else {
		created = true
	}
	r := ref{Owner: sc.Owner, Name: name, Digest: img.Digest, Public: req.Public}
	prev := ""
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
		prev = t.Refs[i].Digest
		t.Refs[i] = r
	} else {
		t.Refs = append(t.Refs, r)
	}
	sweep := false
	if prev != "" && prev != img.Digest && !t.pointsAt(prev) {
		if req.Users != nil && len(req.Users(prev)) == 0 {
			sweep = true
		} else {
			t.Refs = append(t.Refs, ref{Owner: sc.Owner, Digest: prev})
		}
	}
	if err := s.writeRefs(t); err != nil {
		if created {
			os.Remove(s.recordPath(img.Digest))
		}
		return nil, false, err
	}
	if sweep {
		dropped = os.Remove(s.recordPath(prev)) == nil
	}
	img.setRef(r)
	return img, dropped, nil
}

// inspect opens the archive, decompressing a gzip-compressed tar into work, and plans
// the import. The returned func closes what it opened.
func inspect(ctx context.Context, archivePath, name, work string, lim Limits, pr *progress) (*plan, func(), error) {
	fi, err := os.Stat(archivePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, errdefs.NotFound("archive %q not found", archivePath)
	}
	if err != nil {
		return nil, nil, err
	}
	if fi.IsDir() {
		root, err := os.OpenRoot(archivePath)
		if err != nil {
			return nil, nil, err
		}
		a := &dirArchive{root: root}
		if _, err := a.stat("oci-layout"); err != nil {
			root.Close()
			return nil, nil, errdefs.Invalid("directory %q is not an OCI image layout (it has no oci-layout file)", archivePath)
		}
		pl, err := inspectOCI(a)
		if err != nil {
			root.Close()
			return nil, nil, err
		}
		return pl, func() { root.Close() }, nil
	}
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, nil, err
	}
	magic := make([]byte, 4)
	n, _ := io.ReadFull(f, magic)
	magic = magic[:n]
	switch {
	case bytes.HasPrefix(magic, zstdMagic):
		f.Close()
		return nil, nil, errdefs.Invalid("zstd-compressed archives are not supported; decompress it first")
	case bytes.HasPrefix(magic, gzipMagic):
		plain, err := gunzipTo(ctx, f, fi.Size(), filepath.Join(work, "archive.tar"), lim, pr)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		f = plain
	default:
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	pl, err := inspectTar(f, name)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return pl, func() { f.Close() }, nil
}

// gunzipTo decompresses src (size bytes) into a new file at dst and returns it opened.
// It stops as soon as the output passes lim.Unpacked or lim.Ratio times the input.
func gunzipTo(ctx context.Context, src *os.File, size int64, dst string, lim Limits, pr *progress) (*os.File, error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	pr.phase, pr.done, pr.total = "decompress", 0, size
	in := &countingReader{ctx: ctx, r: src, pr: pr}
	zr, err := gzip.NewReader(bufio.NewReader(in))
	if err != nil {
		return nil, errdefs.Invalid("archive is not valid gzip: %v", err)
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	guard := &inflateGuard{r: zr, in: &in.n, max: lim.Unpacked, ratio: lim.Ratio, what: "the archive"}
	if _, err := io.Copy(out, guard); err != nil {
		out.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			return nil, err
		}
		return nil, errdefs.Invalid("archive is not valid gzip: %v", err)
	}
	pr.report()
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// fetchLayer makes sure the layer l is unpacked under layers/ and returns its diff id.
// It unpacks into tmp (a new directory under the import's work dir), checks the
// digests, and renames the result into place; if another import got there first, the
// existing directory is kept.
//
// An existing layer is reused only when it is in known (the layers of the images the
// importer sees); any other layer is unpacked and checked, so a layer's data is never
// granted for naming its digest. bud and lim bound what the layer may unpack.
func (s *Store) fetchLayer(ctx context.Context, l layerSource, tmp string, known map[string]bool, bud *budget, lim Limits, pr *progress) (string, error) {
	if l.diffID != "" && known[l.diffID] {
		if _, err := os.Lstat(s.path("layers", hexOf(l.diffID))); err == nil {
			pr.add(l.size)
			return l.diffID, nil
		}
	}
	rc, _, err := l.open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	blobHash, diffHash := sha256.New(), sha256.New()
	in := &countingReader{ctx: ctx, r: rc, pr: pr}
	br := bufio.NewReaderSize(io.TeeReader(in, blobHash), 1<<20)
	stream, err := decompress(br)
	if err != nil {
		return "", err
	}
	tarStream := io.TeeReader(&inflateGuard{r: stream, in: &in.n, max: lim.Unpacked, ratio: lim.Ratio, what: "a layer"}, diffHash)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return "", err
	}
	if err := unpackLayer(ctx, tarStream, tmp, bud); err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, tarStream); err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			return "", err
		}
		return "", errdefs.Invalid("layer data is corrupt: %v", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return "", err
	}
	if got := "sha256:" + hex.EncodeToString(blobHash.Sum(nil)); l.blob != "" && got != l.blob {
		return "", errdefs.Invalid("layer blob has digest %s, the manifest says %s", got, l.blob)
	}
	id := "sha256:" + hex.EncodeToString(diffHash.Sum(nil))
	if l.diffID != "" && id != l.diffID {
		return "", errdefs.Invalid("layer has diff id %s, the image config says %s", id, l.diffID)
	}
	if err := syncDir(tmp); err != nil {
		return "", err
	}
	err = os.Rename(tmp, s.path("layers", hexOf(id)))
	if err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTEMPTY) {
		return "", err
	}
	return id, nil
}

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
		return nil, errdefs.Invalid("zstd-compressed layers are not supported")
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

// countingReader counts and reports bytes read and stops when ctx ends.
type countingReader struct {
	ctx context.Context
	r   io.Reader
	pr  *progress
	n   int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(b)
	c.n += int64(n)
	c.pr.add(int64(n))
	return n, err
}
