package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Export writes the image ref names for sc to w as a tar archive that Import (and
// other tools) read back with the same digest:
//   - an image that came with a manifest (pulled, or imported from an OCI layout) as an
//     OCI image layout that also has `docker save`'s manifest.json, so `docker load`
//     and `podman load` take it too;
//   - an image imported from a `docker save` archive as such an archive;
//   - an image imported from a plain root filesystem tarball as that tarball.
//
// Every blob is written as the store keeps it and checked against its digest on the
// way: a blob that changed on disk fails the export rather than give a wrong archive.
// The host image, and images stored before the store kept blobs, cannot be exported.
func (s *Store) Export(sc Scope, ref string, w io.Writer) error {
	img, err := s.Get(sc, ref)
	if err != nil {
		return err
	}
	if img.Builtin {
		return errdefs.Invalid("the %s image is made from this node's own /usr and cannot be exported; export an image that was pulled or imported", img.Name)
	}
	if len(img.Blobs) != len(img.Layers) {
		msg := fmt.Sprintf("image %s (%s) was stored without the blobs it came as, so it cannot be exported with its digest; import it again", ref, img.Digest)
		if img.Reference != "" || img.Format == formatOCI {
			msg = fmt.Sprintf("image %s (%s) was pulled without keeping its layers' blobs, so it cannot be exported with its digest: set images.keep_pulled_blobs: true in the daemon's configuration and pull it again with --pull always", ref, img.Digest)
		}
		return &errdefs.Error{Class: errdefs.ErrFailedPrecondition, Msg: msg}
	}
	// Held shared, so no collection removes a blob while it is read.
	unlock, err := s.lock("gc.lock", unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	e := &exporter{s: s, tw: tar.NewWriter(w)}
	switch img.Format {
	case formatRootfs:
		return e.rawBlob(img.Blobs[0], w)
	case formatOCI:
		if err := e.ociLayout(img); err != nil {
			return err
		}
	case formatDocker:
	default:
		return errdefs.Invalid("image %s has the unknown format %q", ref, img.Format)
	}
	if err := e.dockerManifest(img); err != nil {
		return err
	}
	for _, b := range blobsOf(img) {
		if err := e.blob(b); err != nil {
			return err
		}
	}
	return e.tw.Close()
}

// exporter writes one export's tar entries.
type exporter struct {
	s  *Store
	tw *tar.Writer
}

// exportTime is the time of every entry, so the same image exports to the same bytes.
var exportTime = time.Unix(0, 0).UTC()

func (e *exporter) file(name string, b []byte) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: exportTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := e.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := e.tw.Write(b)
	return err
}

// ociLayout writes oci-layout and an index.json naming the image's manifest.
func (e *exporter) ociLayout(img *Image) error {
	raw, err := os.ReadFile(e.s.blobDataPath(img.Manifest))
	if err != nil {
		return fmt.Errorf("read the manifest of %s: %w", img.Digest, err)
	}
	var m struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(raw, &m)
	if m.MediaType == "" {
		m.MediaType = "application/vnd.oci.image.manifest.v1+json"
	}
	desc := descriptor{MediaType: m.MediaType, Digest: img.Manifest, Size: int64(len(raw))}
	if img.Name != "" {
		desc.Annotations = map[string]string{nameAnnotation: img.Name, "org.opencontainers.image.ref.name": img.Name}
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaOCIIndex, "manifests": []descriptor{desc},
	})
	if err != nil {
		return err
	}
	if err := e.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return e.file("index.json", index)
}

// dockerManifest writes the manifest.json of a `docker save` archive.
func (e *exporter) dockerManifest(img *Image) error {
	ent := dockerEntry{Config: blobPath(img.ConfigDigest), RepoTags: []string{}}
	if img.Name != "" {
		ent.RepoTags = []string{img.Name}
	}
	for _, b := range img.Blobs {
		ent.Layers = append(ent.Layers, blobPath(b))
	}
	b, err := json.Marshal([]dockerEntry{ent})
	if err != nil {
		return err
	}
	return e.file("manifest.json", b)
}

// blob writes the kept blob digest under blobs/sha256/, checking its digest.
func (e *exporter) blob(digest string) error {
	f, err := os.Open(e.s.blobDataPath(digest))
	if err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: blobPath(digest), Mode: 0o644, Size: fi.Size(), ModTime: exportTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := e.tw.WriteHeader(hdr); err != nil {
		return err
	}
	return copyChecked(e.tw, f, digest)
}

// rawBlob writes the kept blob digest to w as it is: a root filesystem tarball.
func (e *exporter) rawBlob(digest string, w io.Writer) error {
	f, err := os.Open(e.s.blobDataPath(digest))
	if err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	defer f.Close()
	return copyChecked(w, f, digest)
}

// copyChecked copies r to w and fails if what it read does not have the digest want.
func copyChecked(w io.Writer, r io.Reader, want string) error {
	h := sha256.New()
	if _, err := io.Copy(w, io.TeeReader(r, h)); err != nil {
		return err
	}
	if got := sumOf(h); got != want {
		return &errdefs.Error{Class: errdefs.ErrFailedPrecondition,
			Msg: fmt.Sprintf("the stored blob %s has changed on disk (its digest is now %s); remove the image and pull or import it again", want, got)}
	}
	return nil
}
