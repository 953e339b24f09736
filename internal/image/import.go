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

// Import unpacks the image archive at archivePath (a plain rootfs tarball, optionally
// gzip-compressed; a `docker save` archive; or an OCI image layout, as a directory or a
// tar) and names it name, replacing what the name pointed to. An empty name takes the
// name the archive gives its image. A failed import leaves nothing behind.
func (s *Store) Import(ctx context.Context, archivePath, name string, p Progress) (_ *Image, retErr error) {
	if name != "" {
		if err := validName(name); err != nil {
			return nil, err
		}
	}
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
	defer func() {
		os.RemoveAll(work)
		unlockGC()
		if retErr != nil {
			// Layers this import added are unreferenced now; collect them unless another
			// import runs (which may be about to use them; a later collection gets them).
			if unlock, err := s.lock("meta.lock", unix.LOCK_EX); err == nil {
				s.collectLocked()
				unlock()
			}
		}
	}()

	pr := &progress{fn: p}
	pl, closeSrc, err := inspect(ctx, archivePath, name, work, pr)
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
		id, err := s.fetchLayer(ctx, l, filepath.Join(work, fmt.Sprintf("layer-%d", i)), pr)
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
	return s.commit(img, name)
}

// commit records img (unless its digest is already known) and points name at it.
func (s *Store) commit(img *Image, name string) (*Image, error) {
	unlock, err := s.lock("meta.lock", unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	created := false
	if old, err := s.readRecord(img.Digest); err == nil {
		img = old
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	} else if err := s.writeRecord(img); err != nil {
		return nil, err
	} else {
		created = true
	}
	names, err := s.readNames()
	if err == nil {
		names[name] = img.Digest
		err = s.writeNames(names)
	}
	if err != nil {
		if created {
			os.Remove(s.recordPath(img.Digest))
		}
		return nil, err
	}
	img.Name = name
	return img, nil
}

// inspect opens the archive, decompressing a gzip-compressed tar into work, and plans
// the import. The returned func closes what it opened.
func inspect(ctx context.Context, archivePath, name, work string, pr *progress) (*plan, func(), error) {
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
		plain, err := gunzipTo(ctx, f, fi.Size(), filepath.Join(work, "archive.tar"), pr)
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
func gunzipTo(ctx context.Context, src *os.File, size int64, dst string, pr *progress) (*os.File, error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	pr.phase, pr.done, pr.total = "decompress", 0, size
	zr, err := gzip.NewReader(bufio.NewReader(&countingReader{ctx: ctx, r: src, pr: pr}))
	if err != nil {
		return nil, errdefs.Invalid("archive is not valid gzip: %v", err)
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(out, zr); err != nil {
		out.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
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
func (s *Store) fetchLayer(ctx context.Context, l layerSource, tmp string, pr *progress) (string, error) {
	if l.diffID != "" {
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
	br := bufio.NewReaderSize(io.TeeReader(&countingReader{ctx: ctx, r: rc, pr: pr}, blobHash), 1<<20)
	stream, err := decompress(br)
	if err != nil {
		return "", err
	}
	tarStream := io.TeeReader(stream, diffHash)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return "", err
	}
	if err := unpackLayer(ctx, tarStream, tmp); err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, tarStream); err != nil {
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

// countingReader reports bytes read and stops when ctx ends.
type countingReader struct {
	ctx context.Context
	r   io.Reader
	pr  *progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(b)
	c.pr.add(int64(n))
	return n, err
}
