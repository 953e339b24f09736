package integration

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkExposedPort times requests through an exposed port to a server inside a
// sandbox (network mode baseline): a small file per request (the path's latency) and
// a 16 MiB one (its throughput).
//
//	go test -run '^$' -bench ExposedPort -benchtime 200x ./internal/integration
func BenchmarkExposedPort(b *testing.B) {
	n := testenv.NewNode(b, testenv.Options{Network: true})
	sb := n.Create(b, api.CreateSandboxRequest{Name: "portbench", Network: &api.NetworkPolicy{Mode: "baseline"}})
	res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{
		Shell: "mkdir -p /srv/www && echo small > /srv/www/small && head -c 16M /dev/zero > /srv/www/big", Timeout: execTimeout})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("prepare: %v %+v", err, res)
	}
	if _, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "raw",
		Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, Cwd: "/srv/www"}); err != nil {
		b.Fatal(err)
	}
	p, err := n.Client.ExposePort(background, sb.Name, 8000, true)
	if err != nil {
		b.Fatal(err)
	}
	hc := n.Client.HTTPClient()
	get := func(path string) (int64, error) {
		ctx, cancel := context.WithTimeout(background, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return io.Copy(io.Discard, resp.Body)
	}
	if err := retry(10*time.Second, func() error { _, err := get("small"); return err }); err != nil {
		b.Fatal(err)
	}
	b.Run("small", func(b *testing.B) {
		for range b.N {
			if _, err := get("small"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("16MiB", func(b *testing.B) {
		b.SetBytes(16 << 20)
		for range b.N {
			if n, err := get("big"); err != nil || n != 16<<20 {
				b.Fatalf("got %d bytes, %v", n, err)
			}
		}
	})
}
