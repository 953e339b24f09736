package secret

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// The scopes of a binding: a sandbox-scoped one delivers the version that was newest
// when the sandbox started, until it restarts; an execution-scoped one delivers the
// newest version to each execution as it starts (and, through the proxy, to each
// request).
const (
	ScopeSandbox   = "sandbox"
	ScopeExecution = "execution"
)

// The deliveries of a binding.
const (
	// DeliverProxy puts a placeholder in the sandbox (in a variable or a file); the
	// egress proxy substitutes the value in requests to the binding's hosts only.
	DeliverProxy = "proxy"
	// DeliverFile puts the value in a file on a tmpfs outside the sandbox's layers.
	DeliverFile = "file"
	// DeliverEnv puts the value in a variable of every execution: the higher-risk
	// choice, since any process can read and print its environment.
	DeliverEnv = "env"
)

// Limits on bindings, so no owner can grow a secret's record without bound.
const (
	maxBindingsPerSecret  = 256
	maxBindingsPerSandbox = 64
)

var (
	envNameRE = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	// reservedEnv are the variables Airlock sets itself or that change how every
	// program runs; a binding may not take them.
	reservedEnv = []string{"PATH", "HOME", "USER", "SHELL", "HOSTNAME", "PWD", "LD_PRELOAD", "LD_LIBRARY_PATH",
		"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE",
		"REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO"}
	// fileRoots are where a delivered file may not go: kernel filesystems, the agent's
	// and Airlock's own paths.
	fileRoots = []string{"/proc", "/sys", "/dev", "/run/airlock", "/etc/ssl", "/etc/resolv.conf"}
)

// BindRequest says how to hand a secret to a sandbox.
type BindRequest struct {
	Secret   string
	Sandbox  string // the sandbox's id
	Scope    string // ScopeSandbox (default) or ScopeExecution
	Target   string // a variable name, or an absolute path for a file
	Delivery string // DeliverProxy (default), DeliverFile or DeliverEnv
	Hosts    []string
	Query    bool
	Headers  []string // proxy delivery: where it is substituted (default Authorization)
}

// checkBinding validates req against sec and returns it with defaults filled in.
func checkBinding(sec *store.Secret, req BindRequest) (BindRequest, error) {
	if req.Scope == "" {
		req.Scope = ScopeSandbox
	}
	if req.Delivery == "" {
		req.Delivery = DeliverProxy
	}
	if req.Scope != ScopeSandbox && req.Scope != ScopeExecution {
		return req, errdefs.Invalid("invalid scope %q: sandbox or execution", req.Scope)
	}
	isPath := strings.HasPrefix(req.Target, "/")
	switch req.Delivery {
	case DeliverProxy, DeliverEnv:
		if req.Delivery == DeliverEnv && isPath {
			return req, errdefs.Invalid("env delivery needs a variable name as its target, not the path %q", req.Target)
		}
	case DeliverFile:
		if !isPath {
			return req, errdefs.Invalid("file delivery needs an absolute path as its target, not %q", req.Target)
		}
		if req.Scope == ScopeExecution {
			return req, errdefs.Invalid("file delivery is per sandbox (a mounted file cannot follow one execution); use --scope sandbox")
		}
	default:
		return req, errdefs.Invalid("invalid delivery %q: proxy, file or env", req.Delivery)
	}
	if isPath {
		if req.Target != path.Clean(req.Target) || req.Target == "/" || len(req.Target) > 1024 {
			return req, errdefs.Invalid("invalid target path %q: an absolute, clean path of a file, at most 1024 bytes", req.Target)
		}
		for _, root := range fileRoots {
			if req.Target == root || strings.HasPrefix(req.Target, root+"/") {
				return req, errdefs.Invalid("invalid target path %q: nothing may be delivered under %s", req.Target, root)
			}
		}
		if req.Scope == ScopeExecution {
			return req, errdefs.Invalid("a file target is per sandbox; use --scope sandbox")
		}
	} else {
		if !envNameRE().MatchString(req.Target) {
			return req, errdefs.Invalid("invalid target %q: a variable name (letters, digits, '_'; not starting with a digit) or an absolute file path", req.Target)
		}
		if slices.Contains(reservedEnv, req.Target) || strings.HasPrefix(req.Target, "AIRLOCK_") {
			return req, errdefs.Invalid("the variable %s is Airlock's own or changes how every program runs; choose another name", req.Target)
		}
	}
	if req.Query && req.Delivery != DeliverProxy {
		return req, errdefs.Invalid("--query applies to proxy delivery only")
	}
	if len(req.Headers) > 0 && req.Delivery != DeliverProxy {
		return req, errdefs.Invalid("--header applies to proxy delivery only")
	}
	headers, err := egress.SubstitutionHeaders(req.Headers)
	if err != nil {
		return req, err
	}
	req.Headers = headers
	if len(req.Hosts) == 0 {
		req.Hosts = slices.Clone(sec.AllowedHosts)
	}
	if req.Delivery == DeliverProxy && len(req.Hosts) == 0 {
		return req, errdefs.Invalid("secret %q has no allowed hosts, so proxy delivery has no host to send it to; "+
			"deliver it as a file or env, or create a secret with --allowed-hosts", sec.Name)
	}
	for _, h := range req.Hosts {
		if !slices.ContainsFunc(sec.AllowedHosts, func(a string) bool { return hostCovers(a, h) }) {
			return req, errdefs.Invalid("host %q is not one of secret %q's allowed hosts (%s)", h, sec.Name, strings.Join(sec.AllowedHosts, ", "))
		}
	}
	return req, nil
}

// hostCovers says whether the allowed host a covers h: the same name, or a wildcard
// "*.example.com" and a name (or narrower wildcard) under it.
func hostCovers(a, h string) bool {
	if a == h {
		return true
	}
	suffix, ok := strings.CutPrefix(a, "*")
	return ok && strings.HasSuffix(strings.TrimPrefix(h, "*"), suffix) && len(strings.TrimPrefix(h, "*")) > len(suffix)
}

// Bind hands owner's secret to one of owner's sandboxes (the caller resolved the
// sandbox and checked its policy). A second binding of one target is refused.
func (s *Service) Bind(ctx context.Context, owner string, req BindRequest) (*store.Secret, *store.SecretBinding, error) {
	for {
		sec, err := s.Get(ctx, owner, req.Secret)
		if err != nil {
			return nil, nil, err
		}
		if !sec.RevokedAt.IsZero() {
			return nil, nil, errdefs.Precondition("secret %q is revoked; create a new one", sec.Name)
		}
		if !sec.ExpiresAt.IsZero() && !s.now().Before(sec.ExpiresAt) {
			return nil, nil, errdefs.Precondition("secret %q expired at %s", sec.Name, sec.ExpiresAt.Format(time.RFC3339))
		}
		r, err := checkBinding(sec, req)
		if err != nil {
			return nil, nil, err
		}
		if len(sec.Bindings) >= maxBindingsPerSecret {
			return nil, nil, errdefs.Precondition("secret %q has %d bindings, the most one secret may have", sec.Name, maxBindingsPerSecret)
		}
		bound, err := s.BindingsOf(ctx, owner, r.Sandbox)
		if err != nil {
			return nil, nil, err
		}
		if len(bound) >= maxBindingsPerSandbox {
			return nil, nil, errdefs.Precondition("the sandbox has %d bindings, the most one sandbox may have", maxBindingsPerSandbox)
		}
		for _, b := range bound {
			if b.Binding.Target == r.Target {
				return nil, nil, errdefs.Exists("the sandbox already has secret %q bound at %s; unbind it first", b.Secret, r.Target)
			}
		}
		b := store.SecretBinding{ID: "bnd_" + hex.EncodeToString(randomBytes(8)), Sandbox: r.Sandbox, Scope: r.Scope,
			Target: r.Target, Delivery: r.Delivery, Hosts: r.Hosts, Query: r.Query, Headers: r.Headers, CreatedAt: s.now().UTC()}
		sec.Bindings = append(sec.Bindings, b)
		err = s.st.UpdateSecret(ctx, sec)
		if errors.Is(err, errdefs.ErrVersionConflict) {
			continue // a rotation or another binding came first: decide again on what is stored
		}
		if err != nil {
			return nil, nil, err
		}
		s.changed(owner, r.Sandbox)
		return sec, &b, nil
	}
}

// Unbind removes owner's bindings of a secret to a sandbox (only the one at target,
// if target is set) and returns how many it removed.
func (s *Service) Unbind(ctx context.Context, owner, name, sandbox, target string) (*store.Secret, int, error) {
	for {
		sec, err := s.Get(ctx, owner, name)
		if err != nil {
			return nil, 0, err
		}
		before := len(sec.Bindings)
		sec.Bindings = slices.DeleteFunc(sec.Bindings, func(b store.SecretBinding) bool {
			return b.Sandbox == sandbox && (target == "" || b.Target == target)
		})
		n := before - len(sec.Bindings)
		if n == 0 {
			return nil, 0, errdefs.NotFound("secret %q is not bound to that sandbox%s", name, map[bool]string{true: " at " + target}[target != ""])
		}
		err = s.st.UpdateSecret(ctx, sec)
		if errors.Is(err, errdefs.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		s.changed(owner, sandbox)
		return sec, n, nil
	}
}

// Forget removes every binding to a sandbox that is gone.
func (s *Service) Forget(ctx context.Context, owner, sandbox string) error {
	bound, err := s.BindingsOf(ctx, owner, sandbox)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, b := range bound {
			if !yield(b.Secret) {
				return
			}
		}
	})) {
		if _, _, err := s.Unbind(ctx, owner, name, sandbox, ""); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Bound is one binding with its secret's name and the secret's state.
type Bound struct {
	Secret  string
	Type    string
	Revoked bool
	Binding store.SecretBinding
}

// BindingsOf lists the bindings of owner's secrets to a sandbox, by target.
func (s *Service) BindingsOf(ctx context.Context, owner, sandbox string) ([]Bound, error) {
	all, err := s.st.ListSecrets(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []Bound
	for _, sec := range all {
		for _, b := range sec.Bindings {
			if b.Sandbox == sandbox {
				out = append(out, Bound{Secret: sec.Name, Type: sec.Type, Revoked: !sec.RevokedAt.IsZero(), Binding: b})
			}
		}
	}
	slices.SortFunc(out, func(a, b Bound) int { return strings.Compare(a.Binding.Target, b.Binding.Target) })
	return out, nil
}

// Placeholder is what a sandbox holds in place of a proxy-delivered secret: the same
// for one secret and one sandbox, different for every other pair, and meaningless
// anywhere but in that sandbox's requests.
func (s *Service) Placeholder(owner, name, sandbox string) string {
	mac := hmac.New(sha256.New, s.ring.Fingerprint)
	mac.Write([]byte("placeholder\x00" + owner + "\x00" + name + "\x00" + sandbox))
	return "al_secret_" + hex.EncodeToString(mac.Sum(nil))[:32]
}

// changed tells the delivery (if one watches) that a sandbox's bindings or one of its
// secrets changed.
func (s *Service) changed(owner, sandbox string) {
	s.mu.RLock()
	f := s.onChange
	s.mu.RUnlock()
	if f != nil {
		f(owner, sandbox)
	}
}

// KeyCheck is an HMAC-SHA256 of label under the keyring's fingerprint key, which no
// rekey changes: equal for two copies of one keyring, different for any other, and
// telling nothing of the keys.
func (s *Service) KeyCheck(label string) []byte {
	mac := hmac.New(sha256.New, s.ring.Fingerprint)
	mac.Write([]byte("key-check\x00" + label))
	return mac.Sum(nil)
}
