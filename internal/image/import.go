package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
)

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9._/:-]*[a-z0-9])?$`) })

// validName checks an image name: like a Docker reference, lowercase, optionally
// pinned by "@sha256:<64 hex digits>"; never with spaces, "..", or "//".
func validName(name string) error {
	base, digest, pinned := strings.Cut(name, "@")
	if len(name) > 255 || !nameRE().MatchString(base) || strings.Contains(base, "..") || strings.Contains(base, "//") ||
		(pinned && !validDigest(digest)) {
		return errdefs.Invalid("invalid image name %q: use 1 to 255 lowercase letters, digits, '.', '_', '-', '/' and ':', starting and ending with a letter or digit, without '..' or '//', optionally followed by @sha256:<64 hex digits>", name)
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
// (or a pull of sc's) already has it: naming a digest is not having the data. A failed
// import leaves nothing behind.
func (s *Store) Import(ctx context.Context, sc Scope, req ImportRequest, p Progress) (*Image, error) {
	if err := admit(sc, req.Public, req.Name, "import"); err != nil {
		return nil, err
	}
	pr := &progress{fn: p}
	open := func(in *installer) (*plan, func(), error) {
		return inspect(ctx, req.Archive, req.Name, in.work, in.lim, pr)
	}
	fetch := func(ctx context.Context, in *installer, pl *plan) ([]string, error) {
		pr.phase, pr.done, pr.total = "unpack", 0, 0
		for _, l := range pl.layers {
			pr.total += l.size
		}
		pr.report()
		ids := make([]string, len(pl.layers))
		for i, l := range pl.layers {
			id, err := in.fetchLayer(ctx, l, pr)
			if err != nil {
				return nil, wrapErr(err, "layer %d of %d", i+1, len(pl.layers))
			}
			ids[i] = id
		}
		pr.report()
		return ids, nil
	}
	return s.install(ctx, sc, req, open, fetch)
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
