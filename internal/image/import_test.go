package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// baseLayer and topLayer make a two-layer image: top deletes etc/motd with a whiteout
// and makes var/cache opaque.
func baseLayer(t testing.TB) []byte {
	home := dirEnt("home/u/", 0o750)
	home.Uid, home.Gid = 1000, 1000
	return mkTar(t,
		dirEnt("etc/", 0o755), fileEnt("etc/motd", "hello", 0o644), fileEnt("etc/keep", "k", 0o600),
		hardlinkEnt("etc/motd2", "etc/motd"), symlinkEnt("etc/link", "motd"),
		dirEnt("var/", 0o755), dirEnt("var/cache/", 0o755), fileEnt("var/cache/old", "o", 0o644),
		dirEnt("bin/", 0o755), fileEnt("bin/su", "su", 0o4755), dirEnt("home/", 0o755), home,
	)
}

func topLayer(t testing.TB) []byte {
	return mkTar(t,
		dirEnt("etc/", 0o755), fileEnt("etc/.wh.motd", "", 0o644), fileEnt("etc/added", "a", 0o644),
		dirEnt("var/", 0o755), dirEnt("var/cache/", 0o755), fileEnt("var/cache/.wh..wh..opq", "", 0o644),
		fileEnt("var/cache/new", "n", 0o644),
	)
}

func readIn(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Errorf("read %s: %v", name, err)
	}
	return string(b)
}

// assertClean checks that no import left temp dirs behind.
func assertClean(t *testing.T, s *Store) {
	t.Helper()
	if got := entries(t, s.path("tmp")); len(got) != 0 {
		t.Errorf("tmp holds %v after import", got)
	}
}

func TestImportPlain(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	layer := baseLayer(t)
	dir := t.TempDir()
	var phases []string
	var last [2]int64
	img, err := importLocal(s, context.Background(), writeFile(t, dir, "rootfs.tar", layer), "plain", func(phase string, done, total int64) {
		phases = append(phases, phase)
		last = [2]int64{done, total}
	})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if img.Name != "plain" || img.Digest != digestOf(layer) || !reflect.DeepEqual(img.Layers, []string{digestOf(layer)}) {
		t.Errorf("image = %s %s %v; want plain, digest and one layer %s", img.Name, img.Digest, img.Layers, digestOf(layer))
	}
	if img.Size != int64(len("hello")+len("k")+len("o")+len("su")) {
		t.Errorf("Size = %d, want the unpacked bytes", img.Size)
	}
	if !slices.Contains(phases, "unpack") || last[0] != int64(len(layer)) || last[1] != int64(len(layer)) {
		t.Errorf("progress phases %v, last %v; want unpack ending at %d/%d", phases, last, len(layer), len(layer))
	}
	ld := s.LayerDirs(img)
	if len(ld) != 1 || ld[0] != s.path("layers", hexOf(img.Digest)) {
		t.Fatalf("LayerDirs = %v", ld)
	}
	if got := readIn(t, ld[0], "etc/motd"); got != "hello" {
		t.Errorf("etc/motd = %q", got)
	}
	if st := lstat(t, filepath.Join(ld[0], "home/u")); st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o777 != 0o750 {
		t.Errorf("home/u: %d:%d %o; want 1000:1000 750 (not shifted)", st.Uid, st.Gid, st.Mode&0o777)
	}
	if st := lstat(t, filepath.Join(ld[0], "bin/su")); st.Mode&0o7777 != 0o4755 {
		t.Errorf("bin/su mode %o, want 4755", st.Mode&0o7777)
	}

	// The same tar gzip-compressed is the same image.
	zimg, err := importLocal(s, context.Background(), writeFile(t, dir, "rootfs.tar.gz", gz(t, layer)), "plain-gz", nil)
	if err != nil {
		t.Fatalf("Import gzip: %v", err)
	}
	if zimg.Digest != img.Digest || zimg.Name != "plain-gz" {
		t.Errorf("gzip import = %s %s, want digest %s", zimg.Name, zimg.Digest, img.Digest)
	}
	if got := entries(t, s.path("layers")); len(got) != 1 {
		t.Errorf("layers = %v, want one shared layer", got)
	}
	assertClean(t, s)
}

func TestImportDockerSave(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	cfg := configJSON(t, base, top)
	path := writeFile(t, t.TempDir(), "save.tar", dockerSave(t, "example.com/app:1", cfg, base, top))
	img, err := importLocal(s, context.Background(), path, "", nil)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	want := &Image{
		Name: "example.com/app:1", Digest: digestOf(cfg), Layers: []string{digestOf(base), digestOf(top)},
		Config: Config{Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"}, Entrypoint: []string{"/bin/app"}, Cmd: []string{"--serve"}, WorkingDir: "/srv", User: "1000:1000"},
	}
	if img.Name != want.Name || img.Digest != want.Digest || !reflect.DeepEqual(img.Layers, want.Layers) || !reflect.DeepEqual(img.Config, want.Config) {
		t.Errorf("image = %+v\nwant    %+v", img, want)
	}
	ld := s.LayerDirs(img)
	if st := lstat(t, filepath.Join(ld[0], "etc/motd2")); st.Nlink != 2 {
		t.Errorf("etc/motd2 nlink %d, want a hard link", st.Nlink)
	}
	if target, _ := os.Readlink(filepath.Join(ld[0], "etc/link")); target != "motd" {
		t.Errorf("etc/link -> %q, want motd", target)
	}
	if st := lstat(t, filepath.Join(ld[1], "etc/motd")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("top etc/motd: mode %o rdev %d, want a 0:0 whiteout", st.Mode, st.Rdev)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(ld[1], "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("top var/cache opaque = %q, %v", buf[:n], err)
	}
	if got, err := s.Get(admin, img.Digest); err != nil || got.Name != img.Name {
		t.Errorf("Get(digest) = %+v, %v", got, err)
	}
	assertClean(t, s)
}

func TestImportOCI(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	files, manifest := ociLayout(t, base, top)
	layoutDir := t.TempDir()
	writeTree(t, layoutDir, files)
	tarPath := writeFile(t, t.TempDir(), "oci.tar", tarTree(t, files))
	for _, tc := range []struct{ name, path string }{{"oci-dir", layoutDir}, {"oci-tar", tarPath}} {
		img, err := importLocal(s, context.Background(), tc.path, tc.name, nil)
		if err != nil {
			t.Fatalf("Import %s: %v", tc.name, err)
		}
		if img.Digest != manifest || !reflect.DeepEqual(img.Layers, []string{digestOf(base), digestOf(top)}) {
			t.Errorf("%s: digest %s layers %v; want %s and the uncompressed diff ids", tc.name, img.Digest, img.Layers, manifest)
		}
		if img.Config.WorkingDir != "/srv" {
			t.Errorf("%s: config %+v", tc.name, img.Config)
		}
		if got := readIn(t, s.LayerDirs(img)[1], "var/cache/new"); got != "n" {
			t.Errorf("%s: var/cache/new = %q", tc.name, got)
		}
	}
	if got := entries(t, s.path("layers")); len(got) != 2 {
		t.Errorf("layers = %v, want 2 shared by both imports", got)
	}
	assertClean(t, s)
}

func TestLayerSharingAndReimport(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	other := mkTar(t, fileEnt("other", "x", 0o644))
	dir := t.TempDir()
	a := writeFile(t, dir, "a.tar", dockerSave(t, "a:1", configJSON(t, base, top), base, top))
	files, _ := ociLayout(t, base, other)
	b := writeFile(t, dir, "b.tar", tarTree(t, files))
	imgA, err := importLocal(s, context.Background(), a, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := importLocal(s, context.Background(), b, "b", nil); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, s.path("layers")); len(got) != 3 {
		t.Errorf("layers = %v, want 3 (base shared)", got)
	}
	again, err := importLocal(s, context.Background(), a, "a", nil)
	if err != nil {
		t.Fatalf("re-import: %v", err)
	}
	if again.Digest != imgA.Digest || !again.Created.Equal(imgA.Created) {
		t.Errorf("re-import = %s %v, want the same record %s %v", again.Digest, again.Created, imgA.Digest, imgA.Created)
	}
	if got := entries(t, s.path("layers")); len(got) != 3 {
		t.Errorf("layers after re-import = %v", got)
	}
	assertClean(t, s)
}

func TestConcurrentImports(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	path := writeFile(t, t.TempDir(), "a.tar", dockerSave(t, "a:1", configJSON(t, base, top), base, top))
	other, err := Open(filepath.Dir(s.path("x"))) // a second Store on the same directory
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			st := s
			if i%2 == 1 {
				st = other
			}
			_, errs[i] = importLocal(st, context.Background(), path, fmt.Sprintf("c%d", i), nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("import %d: %v", i, err)
		}
	}
	if got := entries(t, s.path("layers")); len(got) != 2 {
		t.Errorf("layers = %v, want 2", got)
	}
	assertClean(t, s)
}

// TestFailedImportLeavesNothing imports broken and hostile archives.
func TestFailedImportLeavesNothing(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	sentinel := t.TempDir()
	dir := t.TempDir()
	base, top := baseLayer(t), topLayer(t)
	badCfg := configJSON(t, base, mkTar(t, fileEnt("something-else", "", 0o644)))
	ociFiles, _ := ociLayout(t, base, top)
	delete(ociFiles, "blobs/sha256/"+hexOf(digestOf(gz(t, top))))
	ociDir := t.TempDir()
	writeTree(t, ociDir, ociFiles)
	for _, tc := range []struct {
		name, path string
		class      error
	}{
		{"diff id mismatch", writeFile(t, dir, "bad.tar", dockerSave(t, "x:1", badCfg, base, top)), errdefs.ErrInvalidArgument},
		{"missing blob", ociDir, errdefs.ErrInvalidArgument},
		{"garbage", writeFile(t, dir, "garbage", []byte("this is not a tar archive at all, no sir")), errdefs.ErrInvalidArgument},
		{"gzip garbage", writeFile(t, dir, "garbage.gz", gz(t, []byte("nope"))), errdefs.ErrInvalidArgument},
		{"empty", writeFile(t, dir, "empty", nil), errdefs.ErrInvalidArgument},
		{"missing", filepath.Join(dir, "nope.tar"), errdefs.ErrNotFound},
		{"plain dir", sentinel, errdefs.ErrInvalidArgument},
		{"symlink escape", writeFile(t, dir, "esc1.tar", mkTar(t, fileEnt("ok", "x", 0o644), symlinkEnt("a", sentinel), fileEnt("a/pwned", "x", 0o644))), errdefs.ErrInvalidArgument},
		{"dotdot", writeFile(t, dir, "esc2.tar", mkTar(t, fileEnt("../../../../../.."+sentinel+"/pwned", "x", 0o644))), errdefs.ErrInvalidArgument},
		{"absolute", writeFile(t, dir, "esc3.tar", mkTar(t, fileEnt(sentinel+"/pwned", "x", 0o644))), errdefs.ErrInvalidArgument},
		{"hardlink escape", writeFile(t, dir, "esc4.tar", mkTar(t, hardlinkEnt("h", "../../../../../../etc/passwd"))), errdefs.ErrInvalidArgument},
		{"docker layer escape", writeFile(t, dir, "esc5.tar", dockerSave(t, "x:1", configJSON(t, base, top), base, mkTar(t, symlinkEnt("a", sentinel), fileEnt("a/pwned", "", 0o644)))), errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := importLocal(s, context.Background(), tc.path, "victim", nil)
			if !errors.Is(err, tc.class) {
				t.Fatalf("Import error = %v, want class %v", err, tc.class)
			}
			t.Logf("refused: %v", err)
			if got := entries(t, sentinel); len(got) != 0 {
				t.Errorf("sentinel holds %v", got)
			}
			assertClean(t, s)
			if got := entries(t, s.path("layers")); len(got) != 0 {
				t.Errorf("layers = %v, want none", got)
			}
			if imgs, _ := s.List(admin); len(imgs) != 1 || imgs[0].Name != HostName {
				t.Errorf("images after failure = %v, want only host", imgs)
			}
		})
	}
}

func TestImportNames(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	dir := t.TempDir()
	a := writeFile(t, dir, "a.tar", mkTar(t, fileEnt("a", "a", 0o644)))
	for _, bad := range []string{"Upper", "has space", "-lead", "trail-", "host", "sha256:abc", "0123456789abcdef", strings.Repeat("a", 256)} {
		_, err := importLocal(s, context.Background(), a, bad, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("name %q: error %v, want invalid_argument", bad, err)
		}
	}
	if _, err := importLocal(s, context.Background(), a, "Upper", nil); err == nil || !strings.Contains(err.Error(), "lowercase letters, digits") {
		t.Errorf("error %v does not state the rule", err)
	}
	if _, err := importLocal(s, context.Background(), a, "", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unnamed plain import: %v, want invalid_argument", err)
	}
	imgA, err := importLocal(s, context.Background(), a, "docker.io/library/app_x:1.0-rc", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := writeFile(t, dir, "b.tar", mkTar(t, fileEnt("b", "b", 0o644)))
	imgB, err := importLocal(s, context.Background(), b, "docker.io/library/app_x:1.0-rc", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(admin, "docker.io/library/app_x:1.0-rc"); got == nil || got.Digest != imgB.Digest {
		t.Errorf("name points at %v, want %s", got, imgB.Digest)
	}
	old, err := s.Get(admin, imgA.Digest)
	if err != nil || old.Name != "" {
		t.Errorf("replaced image = %+v, %v; want it kept, unnamed", old, err)
	}
}

func TestGetAndList(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	img, err := importLocal(s, context.Background(), writeFile(t, t.TempDir(), "a.tar", mkTar(t, fileEnt("a", "a", 0o644))), "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hexOf(img.Digest)
	for _, ref := range []string{"a", img.Digest, h, h[:12], "sha256:" + h[:12]} {
		if got, err := s.Get(admin, ref); err != nil || got.Digest != img.Digest || got.Name != "a" {
			t.Errorf("Get(%q) = %v, %v; want image a", ref, got, err)
		}
	}
	for _, ref := range []string{h[:11], "b", "", "sha256:" + strings.Repeat("0", 64)} {
		if _, err := s.Get(admin, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) error = %v, want not_found", ref, err)
		}
	}
	imgs, err := s.List(admin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range imgs {
		names = append(names, i.Name)
	}
	if !reflect.DeepEqual(names, []string{"a", HostName}) {
		t.Errorf("List names = %v", names)
	}
}

func TestRemove(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base, top := baseLayer(t), topLayer(t)
	other := mkTar(t, fileEnt("other", "x", 0o644))
	dir := t.TempDir()
	a, err := importLocal(s, context.Background(), writeFile(t, dir, "a.tar", dockerSave(t, "a:1", configJSON(t, base, top), base, top)), "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := ociLayout(t, base, other)
	b, err := importLocal(s, context.Background(), writeFile(t, dir, "b.tar", tarTree(t, files)), "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	inUse := func(d string) []string {
		if d == a.Digest {
			return []string{admin.Owner}
		}
		return nil
	}
	if err := s.Remove(admin, "a", inUse); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Remove in-use image: %v, want failed_precondition saying in use", err)
	}
	if err := s.Remove(admin, HostName, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove host: %v, want failed_precondition", err)
	}
	host, _ := s.Get(admin, HostName)
	if err := s.Remove(admin, host.Digest, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove host by digest: %v, want failed_precondition", err)
	}
	if err := s.Remove(admin, "nope", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Remove unknown: %v, want not_found", err)
	}
	if err := s.Remove(admin, "a", func(string) []string { return nil }); err != nil {
		t.Fatalf("Remove a: %v", err)
	}
	if _, err := s.Get(admin, a.Digest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get removed image: %v", err)
	}
	layers := entries(t, s.path("layers"))
	slices.Sort(layers)
	want := []string{hexOf(digestOf(base)), hexOf(digestOf(other))}
	slices.Sort(want)
	if !reflect.DeepEqual(layers, want) {
		t.Errorf("layers after removing a = %v, want the ones b uses %v", layers, want)
	}
	for _, d := range s.LayerDirs(b) {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("layer of b gone: %v", err)
		}
	}
	// A second name only untags.
	if _, err := importLocal(s, context.Background(), writeFile(t, dir, "b2.tar", tarTree(t, files)), "b2", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(admin, "b2", func(string) []string { return []string{admin.Owner} }); err != nil {
		t.Errorf("untag b2: %v", err)
	}
	if got, err := s.Get(admin, "b"); err != nil || got.Digest != b.Digest {
		t.Errorf("b after untagging b2: %v, %v", got, err)
	}
	if err := s.Remove(admin, hexOf(b.Digest)[:12], nil); err != nil {
		t.Fatalf("Remove b by prefix: %v", err)
	}
	if got := entries(t, s.path("layers")); len(got) != 0 {
		t.Errorf("layers = %v, want none", got)
	}
}

func TestImportCancelled(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := writeFile(t, t.TempDir(), "a.tar", mkTar(t, fileEnt("a", "a", 0o644)))
	if _, err := importLocal(s, ctx, path, "a", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Import with a cancelled context: %v, want context.Canceled", err)
	}
	assertClean(t, s)
	if got := entries(t, s.path("layers")); len(got) != 0 {
		t.Errorf("layers = %v", got)
	}
}

// TestScanTar reads members in place, through PAX long names and links.
func TestScanTar(t *testing.T) {
	long := strings.Repeat("d/", 80) + "blob"
	b := mkTar(t, fileEnt("./"+long, "long body", 0o644), fileEnt("short", "short body", 0o644),
		symlinkEnt("dir/sym", "../short"), hardlinkEnt("hard", "short"), symlinkEnt("loop", "loop"))
	f, err := os.Open(writeFile(t, t.TempDir(), "a.tar", b))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := scanTar(f)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{long: "long body", "/short": "short body", "dir/sym": "short body", "hard": "short body"} {
		rc, size, err := a.open(name)
		if err != nil {
			t.Errorf("open %s: %v", name, err)
			continue
		}
		got := make([]byte, size)
		rc.Read(got)
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, _, err := a.open("loop"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("open loop: %v, want invalid_argument", err)
	}
}

// TestImportNestedIndex imports a layout whose index.json points at a multi-platform
// index (as `docker save` writes with the containerd store), named by annotation.
func TestImportNestedIndex(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	base := baseLayer(t)
	files, manifest := ociLayout(t, base)
	inner := files["index.json"]
	files["blobs/sha256/"+hexOf(digestOf(inner))] = inner
	files["index.json"] = mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": mediaOCIIndex, "digest": digestOf(inner), "size": len(inner),
		"annotations": map[string]string{"io.containerd.image.name": "docker.io/library/app:2"},
	}}})
	img, err := importLocal(s, context.Background(), writeFile(t, t.TempDir(), "n.tar", tarTree(t, files)), "", nil)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if img.Digest != manifest {
		t.Errorf("digest %s, want the amd64 manifest %s", img.Digest, manifest)
	}
	if img.Name != "docker.io/library/app:2" {
		t.Errorf("name %q, want the annotation's", img.Name)
	}
}

// admin is the node's local administrator, the owner of everything these tests import.
var admin = Scope{Owner: LegacyOwner, Admin: true}

func importLocal(s *Store, ctx context.Context, path, name string, p Progress) (*Image, error) {
	return s.Import(ctx, admin, ImportRequest{Archive: path, Name: name}, p)
}
