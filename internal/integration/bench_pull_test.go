package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// Image pull benchmarks, everything on loopback against go-containerregistry's registry
// in the test process:
//
//	bash bench/pull.sh    # installs crane, then:
//	go test ./internal/integration -run '^$' -bench 'Pull|CreateFromPulledImage' -benchtime 5x
//
// Each reports p50s with b.ReportMetric; bench/RESULTS.md records runs.

// The image BenchmarkPull pulls: 200 MiB of random bytes in five gzip layers.
const (
	pullLayers        = 5
	pullFilesPerLayer = 4
	pullFileBytes     = 10 << 20
)

// BenchmarkPull pulls a 200 MiB image of incompressible data from a loopback registry
// with Airlock (into a node's store: download, verify, decompress, unpack, sync) and
// with `crane pull --format=oci` (download, verify, write the blobs to a directory on
// the same file system), and reports each one's p50 throughput in MiB/s of layer blobs
// and airlock/crane (target: at least 0.8). Every iteration pushes a new image outside
// the timer, so neither finds a layer it has, and reads it from the registry once, so
// neither pays for the first read of memory the push just filled (that read is about
// half again as slow as the next ones). They take turns going first, and dirty pages
// are synced before each pull. Without crane on PATH, crane's library does what the
// command does.
func BenchmarkPull(b *testing.B) {
	host := loopbackRegistry(b)
	n := testenv.NewNode(b, testenv.Options{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})
	cranePull := craneCommand(b)
	ctx := context.Background()
	var airlock, crane []float64 // MiB/s
	var times []string
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ref, size := pushRandomImage(b, host, fmt.Sprintf("bench/pull-%d:1", i))
		readBlobs(b, ref)
		dir := filepath.Join(b.TempDir(), "crane")
		goruntime.GC() // making the image left 400 MiB of garbage
		b.StartTimer()
		runAirlock := func() {
			syscall.Sync()
			var read time.Duration // until the last layer's blob was read (and unpacked)
			t0 := time.Now()
			_, err := n.Client.PullImage(ctx, api.PullRequest{Ref: ref}, func(ev api.PullEvent) {
				if ev.Status == "verifying" {
					read = time.Since(t0)
				}
			})
			if err != nil {
				b.Fatalf("airlock pull %s: %v", ref, err)
			}
			d := time.Since(t0)
			airlock = append(airlock, mibPerSecond(size, d))
			times = append(times, fmt.Sprintf("airlock %d/%d", d.Milliseconds(), read.Milliseconds()))
		}
		runCrane := func() {
			syscall.Sync()
			t0 := time.Now()
			if err := cranePull(ctx, ref, dir); err != nil {
				b.Fatalf("crane pull %s: %v", ref, err)
			}
			d := time.Since(t0)
			crane = append(crane, mibPerSecond(size, d))
			times = append(times, fmt.Sprintf("crane %d", d.Milliseconds()))
		}
		if i%2 == 0 {
			runAirlock()
			runCrane()
		} else {
			runCrane()
			runAirlock()
		}
		b.StopTimer()
		if err := n.Client.RemoveImage(ctx, ref); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.Logf("ms per pull, in order (airlock: whole pull/last blob read): %s", strings.Join(times, ", "))
	a, c := median(airlock), median(crane)
	b.ReportMetric(a, "airlock-MiB/s")
	b.ReportMetric(c, "crane-MiB/s")
	b.ReportMetric(a/c, "airlock/crane")
}

// BenchmarkCreateFromPulledImage compares create → first exec result on an image pulled
// from a loopback registry (a static program as /bin/true) against the same on the host
// image, taking turns (pulled, host, host, pulled per iteration) to cancel drift, and
// reports each one's p50 and pulled/host (target: at most 1.1). Terminations are
// outside the timer; so is the first create of each, which is logged.
func BenchmarkCreateFromPulledImage(b *testing.B) {
	host := loopbackRegistry(b)
	n := testenv.NewNode(b, testenv.Options{Config: func(c *manager.Config) { c.InsecureRegistries = []string{host} }})
	ref := pushTrueImage(b, host)
	ctx := context.Background()
	if _, err := n.Client.PullImage(ctx, api.PullRequest{Ref: ref}, nil); err != nil {
		b.Fatalf("pull %s: %v", ref, err)
	}
	seq := 0
	createExec := func(image string) time.Duration {
		seq++
		sbName := fmt.Sprintf("cfp-%d", seq)
		t0 := time.Now()
		if _, err := n.Client.Create(ctx, api.CreateSandboxRequest{Name: sbName, Image: image}); err != nil {
			b.Fatalf("create on %q: %v", image, err)
		}
		res, err := n.Client.Exec(ctx, sbName, api.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec /bin/true on %q: %v %+v", image, err, res)
		}
		d := time.Since(t0)
		b.StopTimer()
		if _, err := n.Client.Terminate(ctx, sbName); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return d
	}
	b.Logf("first create → exec: pulled %v, host %v", createExec(ref), createExec(""))
	var pulled, hostImage []time.Duration
	for b.Loop() {
		pulled = append(pulled, createExec(ref))
		hostImage = append(hostImage, createExec(""), createExec(""))
		pulled = append(pulled, createExec(ref))
	}
	p, h := p50(pulled), p50(hostImage)
	b.ReportMetric(p, "pulled-p50-ms")
	b.ReportMetric(h, "host-p50-ms")
	b.ReportMetric(p/h, "pulled/host")
}

// loopbackRegistry starts go-containerregistry's registry on 127.0.0.1 for the rest of
// the benchmark and returns its host:port.
func loopbackRegistry(b *testing.B) string {
	reg := httptest.NewServer(registry.New(registry.Logger(netQuietLog())))
	b.Cleanup(reg.Close)
	return strings.TrimPrefix(reg.URL, "http://")
}

// craneCommand returns what pulls an image the way `crane pull --format=oci REF DIR`
// does: the crane binary when it is on PATH, else the same calls of its library.
func craneCommand(b *testing.B) func(ctx context.Context, ref, dir string) error {
	if bin, err := exec.LookPath("crane"); err == nil {
		b.Logf("crane: %s", bin)
		return func(ctx context.Context, ref, dir string) error {
			out, err := exec.CommandContext(ctx, bin, "pull", "--insecure", "--format=oci", ref, dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
	}
	b.Logf("crane: not on PATH (bench/pull.sh installs it); timing its library instead")
	return func(ctx context.Context, ref, dir string) error {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			return err
		}
		img, err := remote.Image(r, remote.WithContext(ctx))
		if err != nil {
			return err
		}
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			return err
		}
		return p.AppendImage(img)
	}
}

// readBlobs reads every layer blob of ref from its registry once.
func readBlobs(b *testing.B, ref string) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		b.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// pushRandomImage pushes an image of pullLayers gzip layers of files of random bytes
// to repo (a repository and tag) on host, and returns its reference and the bytes of
// its layer blobs.
func pushRandomImage(b *testing.B, host, repo string) (string, int64) {
	var layers []v1.Layer
	var size int64
	for i := range pullLayers {
		l := gzipLayer(b, pullFilesPerLayer*pullFileBytes, func(tw *tar.Writer) error {
			dir := fmt.Sprintf("data/%d/", i)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}); err != nil {
				return err
			}
			for j := range pullFilesPerLayer {
				hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%sf%d", dir, j), Mode: 0o644, Size: pullFileBytes}
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				if _, err := io.CopyN(tw, rand.Reader, pullFileBytes); err != nil {
					return err
				}
			}
			return nil
		})
		n, err := l.Size()
		if err != nil {
			b.Fatal(err)
		}
		layers, size = append(layers, l), size+n
	}
	return pushImage(b, host+"/"+repo, layers...), size
}

// pushTrueImage pushes a one-layer image whose /bin/true is a static program that
// exits 0, and returns its reference.
func pushTrueImage(b *testing.B, host string) string {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	build := exec.Command("go", "build", "-o", "true", "main.go")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the image's program: %v\n%s", err, out)
	}
	prog, err := os.ReadFile(filepath.Join(dir, "true"))
	if err != nil {
		b.Fatal(err)
	}
	l := gzipLayer(b, len(prog), func(tw *tar.Writer) error {
		for _, d := range []struct {
			name string
			mode int64
		}{{"bin/", 0o755}, {"etc/", 0o755}, {"root/", 0o700}, {"tmp/", 0o1777}} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode}); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			body []byte
		}{{"bin/true", prog}, {"etc/passwd", []byte("root:x:0:0:root:/root:/bin/true\n")}} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o755, Size: int64(len(f.body))}); err != nil {
				return err
			}
			if _, err := tw.Write(f.body); err != nil {
				return err
			}
		}
		return nil
	})
	return pushImage(b, host+"/bench/true:1", l)
}

// gzipLayer makes a gzip-compressed layer of the tar entries write writes, about size
// bytes. Random data compresses at no level, so the fastest one gives what any gzip
// would.
func gzipLayer(b *testing.B, size int, write func(*tar.Writer) error) v1.Layer {
	var buf bytes.Buffer
	buf.Grow(size + size/64 + 64<<10)
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		b.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := write(tw); err != nil {
		b.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	blob := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(blob)), nil })
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// pushImage pushes a linux/GOARCH image of layers to ref and returns ref.
func pushImage(b *testing.B, ref string, layers ...v1.Layer) string {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		b.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		b.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		b.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		b.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

func mibPerSecond(bytes int64, d time.Duration) float64 {
	return float64(bytes) / (1 << 20) / d.Seconds()
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}
