package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
)

// The store keeps, beside each unpacked layer, the blob it was unpacked from (as the
// registry or the archive stored it: compressed or not), and each image's manifest and
// config bytes, all by digest under blobs/. An export writes them back as they came, so
// an image exported and imported again, or pushed elsewhere, keeps its digest. A blob
// is kept while a record or a pending pull names it (collectLocked).

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blobDataPath is where the store keeps the blob with this digest.
func (s *Store) blobDataPath(digest string) string { return s.path("blobs", hexOf(digest)) }

// hasBlobData reports whether the store keeps the blob with this digest.
func (s *Store) hasBlobData(digest string) bool {
	if !validDigest(digest) {
		return false
	}
	fi, err := os.Lstat(s.blobDataPath(digest))
	return err == nil && fi.Mode().IsRegular()
}

// keepBlob moves the verified blob file tmp (whose digest is digest) into the store; a
// blob the store already keeps stays as it is.
func (s *Store) keepBlob(tmp, digest string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, s.blobDataPath(digest), unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		return os.Remove(tmp)
	}
	return err
}

// keepMetadata keeps the manifest or config bytes b under their digest.
func (s *Store) keepMetadata(b []byte) (string, error) {
	d := digestOf(b)
	if s.hasBlobData(d) {
		return d, nil
	}
	return d, durable.WriteFile(s.blobDataPath(d), b, 0o600)
}

// blobsOf lists the blobs the record img keeps: its manifest, config and layer blobs.
func blobsOf(img *Image) []string {
	var out []string
	for _, d := range append([]string{img.Manifest, img.ConfigDigest}, img.Blobs...) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}
