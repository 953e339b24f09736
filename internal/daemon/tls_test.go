package daemon

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv/testca"
)

// TestCertFiles: the pair is checked and loaded at start, a key others may read is
// refused, a renewed pair is served from the next handshake, and a broken renewal
// keeps the last good one.
func TestCertFiles(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := testca.New(t)
	ca.Issue(t, 10, certPath, keyPath)
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	if err := os.Chmod(keyPath, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := openCertFiles(certPath, keyPath, log); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key of mode 0640: %v, want it refused", err)
	}
	os.Chmod(keyPath, 0o600)
	if _, err := openCertFiles(certPath, filepath.Join(dir, "none.pem"), log); err == nil {
		t.Errorf("a missing key was taken")
	}
	c, err := openCertFiles(certPath, keyPath, log)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		pair, err := c.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	if got := serial(); got != 10 {
		t.Fatalf("serving serial %d, want 10", got)
	}
	ca.Issue(t, 11, certPath, keyPath)
	if got := serial(); got != 11 {
		t.Errorf("after renewal, serving serial %d, want 11", got)
	}
	ca.Issue(t, 13, certPath, keyPath)
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 11 {
		t.Errorf("after a renewal with a key others may read, serving serial %d, want the last good 11", got)
	}
	if err := os.WriteFile(certPath, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 11 {
		t.Errorf("after a broken renewal, serving serial %d, want the last good 11", got)
	}
	if !strings.Contains(logBuf.String(), "do not load") {
		t.Errorf("a broken renewal was not logged: %q", logBuf.String())
	}
	// And through a real handshake.
	ca.Issue(t, 12, certPath, keyPath)
	l, err := tls.Listen("tcp", "127.0.0.1:0", c.config())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err == nil {
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake with the CA: %v", err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 12 {
		t.Errorf("handshake served serial %d, want 12", got)
	}
}
