package secret_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// TestNoAllowedHosts: a secret with no allowed hosts is for file or env delivery only;
// proxy delivery has nowhere to send it, and says so.
func TestNoAllowedHosts(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "db", Type: "password", Value: []byte("pw")}); err != nil {
		t.Fatalf("a secret without allowed hosts: %v", err)
	}
	_, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "db", Sandbox: "sb_1", Target: "DB"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "no allowed hosts") {
		t.Errorf("proxy delivery of a secret without hosts: %v, want invalid: no allowed hosts", err)
	}
	for _, req := range []secret.BindRequest{{Target: "/etc/db-password", Delivery: "file"}, {Target: "DB", Delivery: "env"}} {
		req.Secret, req.Sandbox = "db", "sb_1"
		if _, _, err := s.Bind(ctx, "alice", req); err != nil {
			t.Errorf("%s delivery of a secret without hosts: %v", req.Delivery, err)
		}
	}
}

func TestBindRules(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "gh", Type: "token",
		AllowedHosts: []string{"api.github.com", "*.githubusercontent.com"}, Value: []byte("ghp_value_1234567890")}); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		req  secret.BindRequest
		want string
	}{
		{secret.BindRequest{Target: "GH", Scope: "forever"}, "invalid scope"},
		{secret.BindRequest{Target: "GH", Delivery: "carrier-pigeon"}, "invalid delivery"},
		{secret.BindRequest{Target: "/run/gh", Delivery: "env"}, "needs a variable name"},
		{secret.BindRequest{Target: "GH", Delivery: "file"}, "needs an absolute path"},
		{secret.BindRequest{Target: "/etc/gh", Delivery: "file", Scope: "execution"}, "per sandbox"},
		{secret.BindRequest{Target: "/etc/../gh", Delivery: "file"}, "clean path"},
		{secret.BindRequest{Target: "/proc/self/gh", Delivery: "file"}, "under /proc"},
		{secret.BindRequest{Target: "/run/airlock/session/token", Delivery: "file"}, "under /run/airlock"},
		{secret.BindRequest{Target: "1GH"}, "invalid target"},
		{secret.BindRequest{Target: "LD_PRELOAD", Delivery: "env"}, "Airlock's own"},
		{secret.BindRequest{Target: "AIRLOCK_API"}, "Airlock's own"},
		{secret.BindRequest{Target: "GH", Delivery: "env", Query: true}, "proxy delivery only"},
		{secret.BindRequest{Target: "GH", Hosts: []string{"evil.example"}}, `not one of secret "gh"'s allowed hosts`},
		{secret.BindRequest{Target: "GH", Hosts: []string{"githubusercontent.com"}}, "not one of"},
		{secret.BindRequest{Target: "GH", Delivery: "env", Headers: []string{"X-Api-Key"}}, "proxy delivery only"},
		{secret.BindRequest{Target: "GH", Headers: []string{"X Api Key"}}, `invalid header name "X Api Key"`},
		{secret.BindRequest{Target: "GH", Headers: []string{"X-Key:"}}, "invalid header name"},
		{secret.BindRequest{Target: "GH", Headers: []string{""}}, "invalid header name"},
		{secret.BindRequest{Target: "GH", Headers: []string{strings.Repeat("x", 129)}}, "at most 128 bytes"},
		{secret.BindRequest{Target: "GH", Headers: []string{"host"}}, "never substituted in the Host header"},
		{secret.BindRequest{Target: "GH", Headers: []string{"Proxy-Authorization"}}, "Proxy-Authorization"},
		{secret.BindRequest{Target: "GH", Headers: []string{"connection"}}, "Connection"},
		{secret.BindRequest{Target: "GH", Headers: []string{"X-Forwarded-For"}}, "X-Forwarded-For"},
		{secret.BindRequest{Target: "GH", Headers: []string{"Content-Length"}}, "Content-Length"},
		{secret.BindRequest{Target: "GH", Headers: strings.Split(strings.Repeat("X-A,", 17)[:4*17-1], ",")}, "at most 16"},
	}
	for _, c := range bad {
		c.req.Secret, c.req.Sandbox = "gh", "sb_1"
		_, _, err := s.Bind(ctx, "alice", c.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Bind(%+v) = %v, want invalid: %q", c.req, err, c.want)
		}
	}
	if sec, _ := s.Get(ctx, "alice", "gh"); len(sec.Bindings) != 0 {
		t.Fatalf("refused bindings changed the secret: %+v", sec.Bindings)
	}

	_, b, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "GH", Hosts: []string{"raw.githubusercontent.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Scope != secret.ScopeSandbox || b.Delivery != secret.DeliverProxy || b.Hosts[0] != "raw.githubusercontent.com" || b.Headers != nil {
		t.Errorf("defaults: %+v", b)
	}
	_, bh, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "GH_KEY",
		Headers: []string{"x-api-key", "Authorization", "X-API-KEY"}})
	if err != nil || !slicesEqual(bh.Headers, []string{"X-Api-Key", "Authorization"}) {
		t.Errorf("headers of a binding: %+v, %v; want X-Api-Key and Authorization, canonical, once each", bh, err)
	}
	if _, n, err := s.Unbind(ctx, "alice", "gh", "sb_1", "GH_KEY"); n != 1 || err != nil {
		t.Fatalf("unbind GH_KEY: %d, %v", n, err)
	}
	if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "GH"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second binding at one target: %v, want already exists", err)
	}
	if _, _, err := s.Bind(ctx, "bob", secret.BindRequest{Secret: "gh", Sandbox: "sb_2", Target: "GH"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another owner binds alice's secret: %v, want not found", err)
	}
	_, b2, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "/etc/gh-token", Delivery: "file"})
	if err != nil {
		t.Fatal(err)
	}
	if !slicesEqual(b2.Hosts, []string{"api.github.com", "*.githubusercontent.com"}) {
		t.Errorf("default hosts %v, want the secret's", b2.Hosts)
	}
	bound, err := s.BindingsOf(ctx, "alice", "sb_1")
	if err != nil || len(bound) != 2 || bound[0].Binding.Target != "/etc/gh-token" || bound[1].Binding.Target != "GH" {
		t.Fatalf("BindingsOf = %+v, %v", bound, err)
	}
	if p1, p2 := s.Placeholder("alice", "gh", "sb_1"), s.Placeholder("alice", "gh", "sb_2"); p1 == p2 || !strings.HasPrefix(p1, "al_secret_") ||
		p1 != s.Placeholder("alice", "gh", "sb_1") {
		t.Errorf("placeholders %q and %q: want stable per sandbox and different between sandboxes", p1, p2)
	}
	if _, n, err := s.Unbind(ctx, "alice", "gh", "sb_1", "GH"); err != nil || n != 1 {
		t.Errorf("Unbind one target = %d, %v", n, err)
	}
	if _, _, err := s.Unbind(ctx, "alice", "gh", "sb_9", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Unbind of a sandbox with no binding: %v, want not found", err)
	}
	if err := s.Forget(ctx, "alice", "sb_1"); err != nil {
		t.Fatal(err)
	}
	if bound, _ := s.BindingsOf(ctx, "alice", "sb_1"); len(bound) != 0 {
		t.Errorf("Forget left %+v", bound)
	}
	if _, err := s.Revoke(ctx, "alice", "gh"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "GH"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("binding a revoked secret: %v, want failed precondition", err)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestConcurrentRotateAndBind races rotations against bindings of one secret: every
// rotation gets its own version, every binding is kept, and nothing is lost to a
// concurrent update.
func TestConcurrentRotateAndBind(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "k", Type: "password", AllowedHosts: []string{"db.example"}, Value: []byte("v0")}); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := s.Rotate(ctx, "alice", "k", fmt.Appendf(nil, "v%d", i+1))
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "k", Sandbox: fmt.Sprintf("sb_%d", i), Target: "DB_PASSWORD"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sec, err := s.Get(ctx, "alice", "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Versions) != n+1 || len(sec.Bindings) != n {
		t.Fatalf("%d versions and %d bindings, want %d and %d", len(sec.Versions), len(sec.Bindings), n+1, n)
	}
	seen := map[string]bool{}
	for i, v := range sec.Versions {
		if v.Version != i+1 {
			t.Errorf("version %d numbered %d", i+1, v.Version)
		}
		got, err := s.Value(ctx, "alice", "k", v.Version)
		if err != nil || seen[string(got)] {
			t.Errorf("version %d: %q, %v (a value twice, or lost)", v.Version, got, err)
		}
		seen[string(got)] = true
	}
}

// BenchmarkValue is what the proxy pays per substituted request on top of the
// substitution itself: reading the secret's record and opening its value.
func BenchmarkValue(b *testing.B) {
	dir := b.TempDir()
	st, err := sqlite.Open(dir + "/db")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := secret.Open(st, dir+"/secret.key")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: "gh", Type: "token", AllowedHosts: []string{"api.github.com"},
		Value: []byte("ghp_" + strings.Repeat("x", 36))}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Value(ctx, "alice", "gh", 0); err != nil {
			b.Fatal(err)
		}
	}
}
