// Package s3test starts a real S3 server for tests: SeaweedFS's `weed server` with a
// master, a volume server, a filer and the S3 gateway, in a temporary directory, on
// free loopback ports, with one identity. It stops the server by its pid and removes
// the directory when the test ends, even when it fails. Without the weed binary (see
// scripts/deps.sh) the test is skipped, except in CI (CI=true), where it fails.
//
// It must not import the packages it helps test.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/objstore"
)

// Server is one running SeaweedFS S3 server.
type Server struct {
	Endpoint             string // http://127.0.0.1:PORT, or StartOn's address
	AccessKey, SecretKey string
}

// Config is the configuration of bucket on s.
func (s *Server) Config(bucket string) objstore.S3Config {
	return objstore.S3Config{Endpoint: s.Endpoint, Bucket: bucket, Region: "us-east-1", AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

// Binary returns the weed binary: on PATH, or where `go install` puts it.
func Binary() (string, error) {
	if p, err := exec.LookPath("weed"); err == nil {
		return p, nil
	}
	home, _ := os.UserHomeDir()
	for _, p := range []string{os.Getenv("GOBIN"), filepath.Join(os.Getenv("GOPATH"), "bin"), filepath.Join(home, "go", "bin")} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(p, "weed")); err == nil && st.Mode().IsRegular() {
			return filepath.Join(p, "weed"), nil
		}
	}
	return "", fmt.Errorf("weed (SeaweedFS) is not installed: run scripts/deps.sh")
}

// Start starts a server for t and waits until its S3 gateway answers. It holds at most
// 256 MiB; StartSized holds more.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, netip.Addr{})
}

// StartOn is Start with the S3 gateway listening on addr, an address of this host,
// instead of loopback (for nodes in network namespaces of their own); the master,
// volume server and filer stay on loopback. An invalid addr is loopback, as Start.
func StartOn(t testing.TB, addr netip.Addr) *Server {
	t.Helper()
	return start(t, addr, 4)
}

// StartSized is Start with room for volumes 64 MiB volumes (disk is used only as
// objects are written).
func StartSized(t testing.TB, volumes int) *Server {
	t.Helper()
	return start(t, netip.Addr{}, volumes)
}

func start(t testing.TB, addr netip.Addr, volumes int) *Server {
	t.Helper()
	if !addr.IsValid() {
		addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	// The ports are free when chosen but another process may take one before weed
	// binds it (tests start servers side by side): a server that exits before it is
	// ready is started again on other ports.
	var log []byte
	for range 3 {
		s, exited := launch(t, bin, addr, volumes)
		if s != nil {
			return s
		}
		log = exited
	}
	t.Fatalf("weed server exited three times; the last time: %s", tail(log))
	return nil
}

// launch starts one weed server and waits until it is ready (the server), or until it
// exits first (nil and its log).
func launch(t testing.TB, bin string, addr netip.Addr, volumes int) (*Server, []byte) {
	t.Helper()
	dir := t.TempDir() // removed after the server is stopped: cleanups run last first
	s := &Server{AccessKey: "airlocktest", SecretKey: "airlocktest-secret-key"}
	conf := fmt.Sprintf(`{"identities":[{"name":"airlock","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, s.AccessKey, s.SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := freePorts(t, 8)
	port := func(i int) string { return strconv.Itoa(p[i]) }
	s.Endpoint = "http://" + net.JoinHostPort(addr.String(), port(6))
	cmd := exec.Command(bin, "server",
		"-dir="+filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+port(0), "-master.port.grpc="+port(1), "-master.telemetry=false",
		"-master.volumeSizeLimitMB=64", "-volume.max="+strconv.Itoa(volumes), "-volume.preStopSeconds=0",
		"-volume.port="+port(2), "-volume.port.grpc="+port(3),
		"-filer", "-filer.port="+port(4), "-filer.port.grpc="+port(5),
		"-s3", "-s3.ip.bind="+addr.String(), "-s3.port="+port(6), "-s3.port.grpc="+port(7), "-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config="+filepath.Join(dir, "s3.json"))
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		// Ready when a bucket can be made and used: the gateway answers only once the
		// filer does, and the filer writes only once a volume server has joined.
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		err := probe(cctx, s)
		ccancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			return nil, log
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			t.Fatalf("weed server not ready after 3m (%v): %s", err, tail(log))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func probe(ctx context.Context, s *Server) error {
	o, err := objstore.OpenS3(ctx, s.Config("airlock-probe"))
	if err != nil {
		return err
	}
	const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	return o.Put(ctx, "probe", strings.NewReader(""), 0, empty)
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// freePorts returns n distinct loopback ports free at the time of the call.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}
