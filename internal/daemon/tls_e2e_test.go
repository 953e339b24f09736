package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/testenv"
	"github.com/airlockhq/airlock/internal/testenv/testca"
)

// freePort returns a loopback address no one listens on just now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestTLSListeners: with tls_cert and tls_key, listen and e2b_listen serve HTTPS; the Go
// SDK reaches the API at https://, trusting the CA it is given and no other, and a
// plain HTTP request gets no API answer.
func TestTLSListeners(t *testing.T) {
	testenv.RequireHost(t)
	bin := testenv.Binary(t)
	dir, cgroup := daemonDir(t, "tls-")
	t.Cleanup(func() { secret.Unmount(filepath.Join(dir, "secrets")) })
	ca := testca.New(t)
	certPath, keyPath, caPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	ca.Issue(t, 7, certPath, keyPath)
	if err := os.WriteFile(caPath, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	listen, e2bListen := freePort(t), freePort(t)
	cfg := writeConfig(t, dir, cgroup, "listen: "+listen, "e2b_listen: "+e2bListen, "tls_cert: "+certPath, "tls_key: "+keyPath)
	d := startDaemon(t, bin, cfg)
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		d.Wait()
	})
	token, err := os.ReadFile(filepath.Join(dir, "state", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	cl, err := client.New(client.Options{Addr: "https://" + listen, Token: strings.TrimSpace(string(token)), CAFile: caPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.List(ctx, client.ListOptions{}); err != nil {
		t.Errorf("the API over HTTPS, trusting the CA: %v", err)
	}
	t.Setenv("AIRLOCK_CA_FILE", "")
	untrusting, err := client.New(client.Options{Addr: "https://" + listen, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.List(ctx, client.ListOptions{}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the API over HTTPS, trusting only the system's CAs: %v, want a certificate error, not to retry", err)
	}
	plain, err := client.New(client.Options{Addr: listen, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.List(ctx, client.ListOptions{}); err == nil {
		t.Errorf("the API over plain HTTP on the TLS listener answered")
	}

	// The Python SDK, blocking and asyncio, over the same HTTPS listener.
	if py, err := exec.LookPath("/usr/bin/python3"); err == nil {
		sdk, _ := filepath.Abs(filepath.Join("..", "..", "sdk", "python"))
		script := `
import asyncio, sys, airlock, airlock.aio
url, token, ca = sys.argv[1:4]
print(len(airlock.Client(url=url, token=token, ca_file=ca).list()))
async def main():
    async with airlock.aio.AsyncClient(url=url, token=token, ca_file=ca) as c:
        print(len(await c.list()))
asyncio.run(main())
try:
    airlock.Client(url=url, token=token).list()
    print("untrusted: answered")
except airlock.AirlockError as e:
    print("untrusted:", type(e).__name__)
`
		cmd := exec.Command(py, "-c", script, "https://"+listen, strings.TrimSpace(string(token)), caPath)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1", "AIRLOCK_CA_FILE=")
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "0\n0\nuntrusted: FailedPrecondition\n" {
			t.Errorf("the Python SDK over HTTPS: %v\n%s", err, out)
		}
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + e2bListen + "/sandboxes")
	if err != nil {
		t.Fatalf("the E2B API over HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.TLS == nil {
		t.Errorf("the E2B API over HTTPS without a key: %s (TLS %v), want 401 over TLS", resp.Status, resp.TLS != nil)
	}
}
