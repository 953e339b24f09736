package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"runtime"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// archive gives read access to the files of an image archive by their path inside it.
type archive interface {
	open(name string) (io.ReadCloser, int64, error)
	stat(name string) (int64, error)
}

// dirArchive is an OCI image layout directory; os.Root keeps every open inside it.
type dirArchive struct{ root *os.Root }

func (a *dirArchive) open(name string) (io.ReadCloser, int64, error) {
	f, err := a.root.Open(name)
	if err != nil {
		return nil, 0, errdefs.Invalid("image layout has no usable %s: %v", name, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, errdefs.Invalid("image layout: %s is not a regular file", name)
	}
	return f, fi.Size(), nil
}

func (a *dirArchive) stat(name string) (int64, error) {
	fi, err := a.root.Stat(name)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, errdefs.Invalid("image layout has no file %s", name)
	}
	return fi.Size(), nil
}

type tarMember struct {
	off, size int64
	link      string // a symlink or hard link: the member it stands for
}

// tarArchive is an uncompressed tar file indexed by member name; members are read in place.
type tarArchive struct {
	f       *os.File
	members map[string]tarMember
}

// archiveKey normalises a member name ("./a", "/a" and "a" are one member).
func archiveKey(name string) string {
	k := path.Clean("/" + name)[1:]
	if k == "" {
		return "."
	}
	return k
}

// scanTar indexes the members of the tar file f, seeking over their contents.
func scanTar(f *os.File) (*tarArchive, error) {
	a := &tarArchive{f: f, members: map[string]tarMember{}}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) && n > 0 {
			return a, nil
		}
		if err != nil {
			return nil, errdefs.Invalid("archive is not a tar archive, a gzip-compressed one, or an OCI image layout: %v", err)
		}
		name := archiveKey(hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeReg:
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			a.members[name] = tarMember{off: off, size: hdr.Size}
		case tar.TypeSymlink:
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			a.members[name] = tarMember{link: archiveKey(target)}
		case tar.TypeLink:
			a.members[name] = tarMember{link: archiveKey(hdr.Linkname)}
		}
	}
}

func (a *tarArchive) member(name string) (tarMember, error) {
	key := archiveKey(name)
	for range 16 {
		m, ok := a.members[key]
		if !ok {
			return m, errdefs.Invalid("archive has no file %s", name)
		}
		if m.link == "" {
			return m, nil
		}
		key = m.link
	}
	return tarMember{}, errdefs.Invalid("archive member %s: too many links", name)
}

func (a *tarArchive) open(name string) (io.ReadCloser, int64, error) {
	m, err := a.member(name)
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(io.NewSectionReader(a.f, m.off, m.size)), m.size, nil
}

func (a *tarArchive) stat(name string) (int64, error) {
	m, err := a.member(name)
	return m.size, err
}

// layerSource is one layer of a plan: how to read its blob and what it must hash to.
type layerSource struct {
	diffID   string // expected diff id; "" when the archive does not say
	blob     string // expected digest of the blob as stored; "" when the archive does not say
	size     int64  // stored bytes: the most that is read of the blob, and progress
	registry string // the registry a pulled blob comes from; "" for archives
	// verified says the reader open gives checks the blob's digest itself as it
	// streams (and fails at its end on a mismatch), so it is not hashed twice.
	verified bool
	open     func() (io.ReadCloser, int64, error)
}

// plan is what an archive or a registry holds, found before anything is unpacked.
type plan struct {
	digest    string // "" for a plain rootfs: the layer's diff id, known once unpacked
	reference string // the canonical registry reference of a pulled image
	config    Config
	tag       string // the name the archive gives its image, if any
	layers    []layerSource
	// format is how the image came (formatOCI, formatDocker, formatRootfs), and manifest
	// and rawConfig the bytes of its manifest and config as they came: the store keeps
	// them with the layer blobs, so an export gives back the same digests.
	format              string
	manifest, rawConfig []byte
}

// The formats of the images the store keeps, which an export writes back.
const (
	formatOCI    = "oci"    // a manifest (pulled, or from an OCI layout): the digest is the manifest's
	formatDocker = "docker" // a `docker save` image: the digest is the config's
	formatRootfs = "rootfs" // a plain root filesystem tarball: the digest is its layer's
)

const (
	nameAnnotation   = "io.containerd.image.name"
	mediaOCIIndex    = "application/vnd.oci.image.index.v1+json"
	mediaDockerList  = "application/vnd.docker.distribution.manifest.list.v2+json"
	maxMetadataBytes = 8 << 20
	defaultPath      = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociIndex struct {
	Manifests []descriptor `json:"manifests"`
}

type ociManifest struct {
	Config descriptor   `json:"config"`
	Layers []descriptor `json:"layers"`
}

// imageConfig is the part of an OCI/Docker image config Airlock reads.
type imageConfig struct {
	Config struct {
		Env        []string `json:"Env"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func (c *imageConfig) runConfig() Config {
	k := c.Config
	return Config{Env: k.Env, Entrypoint: k.Entrypoint, Cmd: k.Cmd, WorkingDir: k.WorkingDir, User: k.User}
}

type dockerEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

func blobPath(digest string) string { return "blobs/sha256/" + hexOf(digest) }

// readJSON decodes the archive file name into v and returns its digest, which must be
// want unless want is "".
func readJSON(a archive, name, want string, v any) (string, error) {
	d, _, err := readJSONRaw(a, name, want, v)
	return d, err
}

// readJSONRaw is readJSON that also returns the file's bytes, for the store to keep.
func readJSONRaw(a archive, name, want string, v any) (string, []byte, error) {
	rc, _, err := a.open(name)
	if err != nil {
		return "", nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxMetadataBytes+1))
	if err != nil {
		return "", nil, err
	}
	if len(b) > maxMetadataBytes {
		return "", nil, errdefs.Invalid("archive file %s is larger than %d bytes", name, maxMetadataBytes)
	}
	sum := sha256.Sum256(b)
	got := "sha256:" + hex.EncodeToString(sum[:])
	if want != "" && got != want {
		return "", nil, errdefs.Invalid("archive file %s has digest %s, expected %s", name, got, want)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return "", nil, errdefs.Invalid("archive file %s is not valid JSON: %v", name, err)
	}
	return got, b, nil
}

// layerSources pairs the layer blobs (archive paths, with their digests where known)
// with the config's diff ids, when it lists them. Every blob must be present.
func layerSources(a archive, cfg *imageConfig, names, blobs []string) ([]layerSource, error) {
	ids := cfg.RootFS.DiffIDs
	if len(ids) > 0 && len(ids) != len(names) {
		return nil, errdefs.Invalid("image config lists %d diff ids for %d layers", len(ids), len(names))
	}
	if len(names) == 0 {
		return nil, errdefs.Invalid("image has no layers")
	}
	out := make([]layerSource, len(names))
	for i, name := range names {
		size, err := a.stat(name)
		if err != nil {
			return nil, err
		}
		l := layerSource{blob: blobs[i], size: size}
		if len(ids) > 0 {
			if !validDigest(ids[i]) {
				return nil, errdefs.Invalid("image config: diff id %q is not a sha256 digest", ids[i])
			}
			l.diffID = ids[i]
		}
		l.open = func() (io.ReadCloser, int64, error) { return a.open(name) }
		out[i] = l
	}
	return out, nil
}

// inspectOCI reads an OCI image layout: index, the manifest for this platform, config.
func inspectOCI(a archive) (*plan, error) {
	var idx ociIndex
	if _, err := readJSON(a, "index.json", "", &idx); err != nil {
		return nil, err
	}
	var leaves []descriptor
	if err := flattenIndex(a, idx.Manifests, 0, &leaves); err != nil {
		return nil, err
	}
	desc, err := pickManifest(leaves)
	if err != nil {
		return nil, err
	}
	var m ociManifest
	_, rawManifest, err := readJSONRaw(a, blobPath(desc.Digest), desc.Digest, &m)
	if err != nil {
		return nil, err
	}
	if !validDigest(m.Config.Digest) {
		return nil, errdefs.Invalid("manifest %s: config digest %q is not a sha256 digest", desc.Digest, m.Config.Digest)
	}
	var cfg imageConfig
	_, rawConfig, err := readJSONRaw(a, blobPath(m.Config.Digest), m.Config.Digest, &cfg)
	if err != nil {
		return nil, err
	}
	if len(cfg.RootFS.DiffIDs) == 0 {
		return nil, errdefs.Invalid("image config %s lists no diff ids", m.Config.Digest)
	}
	names := make([]string, len(m.Layers))
	blobs := make([]string, len(m.Layers))
	for i, l := range m.Layers {
		if !validDigest(l.Digest) {
			return nil, errdefs.Invalid("manifest %s: layer digest %q is not a sha256 digest", desc.Digest, l.Digest)
		}
		names[i], blobs[i] = blobPath(l.Digest), l.Digest
	}
	layers, err := layerSources(a, &cfg, names, blobs)
	if err != nil {
		return nil, err
	}
	tag := desc.Annotations[nameAnnotation]
	if ref := desc.Annotations["org.opencontainers.image.ref.name"]; tag == "" && strings.ContainsAny(ref, ":/") {
		tag = ref // often only a tag ("latest"); used when it is a whole reference
	}
	return &plan{digest: desc.Digest, config: cfg.runConfig(), tag: tag, layers: layers,
		format: formatOCI, manifest: rawManifest, rawConfig: rawConfig}, nil
}

// flattenIndex collects the image manifests an index names, descending into nested
// indexes; a manifest inherits the image name annotated on an index above it.
func flattenIndex(a archive, descs []descriptor, depth int, out *[]descriptor) error {
	for _, d := range descs {
		if !validDigest(d.Digest) {
			return errdefs.Invalid("image index: digest %q is not a sha256 digest", d.Digest)
		}
		if d.MediaType != mediaOCIIndex && d.MediaType != mediaDockerList {
			*out = append(*out, d)
			continue
		}
		if depth >= 4 {
			return errdefs.Invalid("image index nests too deep")
		}
		var idx ociIndex
		if _, err := readJSON(a, blobPath(d.Digest), d.Digest, &idx); err != nil {
			return err
		}
		if name := d.Annotations[nameAnnotation]; name != "" {
			for i := range idx.Manifests {
				if m := &idx.Manifests[i]; m.Annotations[nameAnnotation] == "" {
					m.Annotations = maps.Clone(m.Annotations)
					if m.Annotations == nil {
						m.Annotations = map[string]string{}
					}
					m.Annotations[nameAnnotation] = name
				}
			}
		}
		if err := flattenIndex(a, idx.Manifests, depth+1, out); err != nil {
			return err
		}
	}
	return nil
}

// pickManifest chooses the only manifest, or the one for linux on this architecture.
func pickManifest(leaves []descriptor) (descriptor, error) {
	var uniq []descriptor
	seen := map[string]bool{}
	for _, d := range leaves {
		if !seen[d.Digest] {
			seen[d.Digest] = true
			uniq = append(uniq, d)
		}
	}
	switch len(uniq) {
	case 0:
		return descriptor{}, errdefs.Invalid("the image index lists no manifests")
	case 1:
		return uniq[0], nil
	}
	var match []descriptor
	var have []string
	for _, d := range uniq {
		if d.Platform == nil {
			have = append(have, "unknown")
			continue
		}
		have = append(have, d.Platform.OS+"/"+d.Platform.Architecture)
		if d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			match = append(match, d)
		}
	}
	want := "linux/" + runtime.GOARCH
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return descriptor{}, errdefs.Invalid("archive has no %s image (it has: %s)", want, strings.Join(have, ", "))
	}
	return descriptor{}, errdefs.Invalid("archive has %d %s images; import one at a time", len(match), want)
}

// inspectDocker reads a `docker save` archive. Its digest is the config's (Docker's image
// id): manifest.json is not content-addressed and changes with the tags saved.
func inspectDocker(a archive, name string) (*plan, error) {
	var ents []dockerEntry
	if _, err := readJSON(a, "manifest.json", "", &ents); err != nil {
		return nil, err
	}
	var e *dockerEntry
	if len(ents) == 1 {
		e = &ents[0]
	}
	for i := range ents {
		for _, t := range ents[i].RepoTags {
			if name != "" && t == name {
				e = &ents[i]
			}
		}
	}
	if e == nil {
		return nil, errdefs.Invalid("archive holds %d images; import it under the tag of the one you want", len(ents))
	}
	var cfg imageConfig
	digest, rawConfig, err := readJSONRaw(a, e.Config, "", &cfg)
	if err != nil {
		return nil, err
	}
	layers, err := layerSources(a, &cfg, e.Layers, make([]string, len(e.Layers)))
	if err != nil {
		return nil, err
	}
	pl := &plan{digest: digest, config: cfg.runConfig(), layers: layers, format: formatDocker, rawConfig: rawConfig}
	if len(e.RepoTags) > 0 {
		pl.tag = e.RepoTags[0]
	}
	return pl, nil
}

// inspectPlain treats the tar file f (size bytes) as one root filesystem layer.
func inspectPlain(f *os.File, size int64) *plan {
	open := func() (io.ReadCloser, int64, error) {
		return io.NopCloser(io.NewSectionReader(f, 0, size)), size, nil
	}
	return &plan{
		config: Config{Env: []string{defaultPath}},
		layers: []layerSource{{size: size, open: open}},
		format: formatRootfs,
	}
}

func (a *tarArchive) has(name string) bool { _, err := a.member(name); return err == nil }

// inspectTar detects what the tar file f holds and plans its import.
func inspectTar(f *os.File, name string) (*plan, error) {
	a, err := scanTar(f)
	if err != nil {
		return nil, err
	}
	switch {
	case a.has("oci-layout") && a.has("index.json"):
		return inspectOCI(a)
	case a.has("manifest.json"):
		return inspectDocker(a, name)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat archive: %w", err)
	}
	return inspectPlain(f, fi.Size()), nil
}
