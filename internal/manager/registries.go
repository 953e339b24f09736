package manager

import (
	"context"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
)

// registryHost is the registry as pulls name it ("docker.io" is Docker Hub's
// "index.docker.io"); "" when it is not a registry host.
func registryHost(registry string) string {
	return image.RegistryOf(registry + "/x")
}

// RegistryLogin keeps the caller's credentials for a registry, sealed like a secret;
// its pulls from there use them unless they bring their own.
func (m *Manager) RegistryLogin(ctx context.Context, owner, registry, username string, password []byte) (string, error) {
	if m.secrets == nil {
		return "", errdefs.Unavailable("this node keeps no secrets")
	}
	host := registryHost(registry)
	if host == "" {
		return "", errdefs.Invalid("invalid registry %q: a host name or address, with :port if not 443 (e.g. ghcr.io, registry.local:5000)", registry)
	}
	return host, m.secrets.Login(ctx, owner, host, username, password)
}

// RegistryLogout forgets the caller's credentials for a registry.
func (m *Manager) RegistryLogout(ctx context.Context, owner, registry string) error {
	if m.secrets == nil {
		return errdefs.Unavailable("this node keeps no secrets")
	}
	return m.secrets.Logout(ctx, owner, registryHost(registry))
}

// pullCredentials fills in the caller's stored login for the registry of a pull that
// brings none.
func (m *Manager) pullCredentials(ctx context.Context, owner string, req *PullRequest) error {
	if req.Username != "" || req.Password != "" || m.secrets == nil {
		return nil
	}
	user, pass, ok, err := m.secrets.RegistryLogin(ctx, owner, image.RegistryOf(req.Ref))
	if ok {
		req.Username, req.Password = user, pass
	}
	return err
}
