package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The helpers here build archives of every supported format in memory.

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// ent is one tar entry; Body is the content of a regular file.
type ent struct {
	tar.Header
	Body string
}

func dirEnt(name string, mode int64) ent {
	return ent{Header: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: testTime}}
}

func fileEnt(name, body string, mode int64) ent {
	return ent{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, ModTime: testTime}, Body: body}
}

func symlinkEnt(name, target string) ent {
	return ent{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: testTime}}
}

func hardlinkEnt(name, target string) ent {
	return ent{Header: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, ModTime: testTime}}
}

func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.Header
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %s: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatalf("tar body %s: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// configJSON is an OCI/Docker image config for layers (uncompressed tars).
func configJSON(t testing.TB, layers ...[]byte) []byte {
	ids := make([]string, len(layers))
	for i, l := range layers {
		ids[i] = digestOf(l)
	}
	return mustJSON(t, map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{
			"Env":        []string{"PATH=/usr/bin:/bin", "FOO=bar"},
			"Entrypoint": []string{"/bin/app"},
			"Cmd":        []string{"--serve"},
			"WorkingDir": "/srv",
			"User":       "1000:1000",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": ids},
	})
}

// dockerSave builds a legacy `docker save` archive.
func dockerSave(t testing.TB, tag string, config []byte, layers ...[]byte) []byte {
	cfgName := hexOf(digestOf(config)) + ".json"
	ents := []ent{fileEnt(cfgName, string(config), 0o644)}
	var paths []string
	for _, l := range layers {
		dir := hexOf(digestOf(l))
		ents = append(ents, dirEnt(dir+"/", 0o755), fileEnt(dir+"/VERSION", "1.0", 0o644), fileEnt(dir+"/layer.tar", string(l), 0o644))
		paths = append(paths, dir+"/layer.tar")
	}
	manifest := mustJSON(t, []map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": paths}})
	ents = append(ents, fileEnt("manifest.json", string(manifest), 0o644))
	return mkTar(t, ents...)
}

// ociLayout returns the files of an OCI image layout (path -> content). The index holds
// an arm64 manifest (with bogus layers) before the amd64 one built from layers, which
// are stored gzip-compressed. It also returns the amd64 manifest digest.
func ociLayout(t testing.TB, layers ...[]byte) (map[string][]byte, string) {
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}
	blob := func(b []byte) map[string]any {
		files["blobs/sha256/"+hexOf(digestOf(b))] = b
		return map[string]any{"digest": digestOf(b), "size": len(b)}
	}
	cfg := blob(configJSON(t, layers...))
	cfg["mediaType"] = "application/vnd.oci.image.config.v1+json"
	var descs []map[string]any
	for _, l := range layers {
		d := blob(gz(t, l))
		d["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
		descs = append(descs, d)
	}
	manifest := mustJSON(t, map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": descs})
	md := blob(manifest)
	md["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
	md["platform"] = map[string]string{"os": "linux", "architecture": "amd64"}
	armCfg := blob([]byte(`{"rootfs":{"diff_ids":["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}}`))
	arm := blob(mustJSON(t, map[string]any{"schemaVersion": 2, "config": armCfg, "layers": []any{armCfg}}))
	arm["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
	arm["platform"] = map[string]string{"os": "linux", "architecture": "arm64"}
	files["index.json"] = mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{arm, md}})
	return files, digestOf(manifest)
}

func writeTree(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func tarTree(t testing.TB, files map[string][]byte) []byte {
	var ents []ent
	for name, b := range files {
		ents = append(ents, fileEnt(name, string(b), 0o644))
	}
	return mkTar(t, ents...)
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// newStore opens a store in a fresh directory.
func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// entries lists the names in dir (nil when it does not exist).
func entries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func lstat(t testing.TB, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("image tests need root (chown, mknod, trusted xattrs)")
		}
		t.Skip("image tests need root (chown, mknod, trusted xattrs)")
	}
}
