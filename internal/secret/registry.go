package secret

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// A registry login is kept as a secret of its owner's like any other (sealed at rest,
// listed by `secret ls` with a preview of dots), named after the registry; pulls from
// that registry use it when they bring no credentials of their own.

var registryRE = lazyRegexp(`^[a-z0-9]([a-z0-9.-]{0,252})(:[0-9]{1,5})?$`)

// RegistryName is the name of the secret that keeps owner's login to registry
// ("host" or "host:port").
func RegistryName(registry string) string {
	return "registry-" + strings.ReplaceAll(registry, ":", "_")
}

// Login keeps username and password for registry, replacing an earlier login (a new
// version).
func (s *Service) Login(ctx context.Context, owner, registry, username string, password []byte) error {
	if !registryRE().MatchString(registry) {
		return errdefs.Invalid("invalid registry %q: a host name or address, with :port if not 443 (e.g. ghcr.io, registry.local:5000)", registry)
	}
	if username == "" || strings.Contains(username, ":") {
		return errdefs.Invalid("a registry login needs a user name without ':'")
	}
	value := append([]byte(username+":"), password...)
	defer clear(value)
	if len(password) == 0 {
		return errdefs.Invalid("the registry password is empty")
	}
	name := RegistryName(registry)
	host, _, _ := strings.Cut(registry, ":")
	sec, err := s.st.GetSecret(ctx, owner, name)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
	case err != nil:
		return err
	case sec.RevokedAt.IsZero():
		_, err = s.Rotate(ctx, owner, name, value)
		return err
	default: // a revoked login is replaced outright
		if err := s.st.DeleteSecret(ctx, owner, name); err != nil {
			return err
		}
	}
	_, err = s.Create(ctx, owner, CreateRequest{Name: name, Type: "password", Description: "login to " + registry,
		AllowedHosts: []string{host}, Value: value})
	return err
}

// Logout forgets owner's login to registry.
func (s *Service) Logout(ctx context.Context, owner, registry string) error {
	err := s.st.DeleteSecret(ctx, owner, RegistryName(registry))
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.NotFound("no login to %s", registry)
	}
	return err
}

// RegistryLogin returns owner's login to registry; ok is false when there is none.
func (s *Service) RegistryLogin(ctx context.Context, owner, registry string) (username, password string, ok bool, err error) {
	v, err := s.Value(ctx, owner, RegistryName(registry), 0)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	defer clear(v)
	user, pass, _ := strings.Cut(string(v), ":")
	return user, pass, true, nil
}

// lazyRegexp compiles expr on first use: bounded repetitions ({0,252}) make large
// programs, and every airlock process (each CLI call) would otherwise pay at start.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
