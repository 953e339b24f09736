package image

import (
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// RegistryOf is the registry ("host" or "host:port") a reference names, Docker Hub's
// "index.docker.io" for a reference that names none; "" when ref does not parse.
func RegistryOf(ref string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Context().RegistryStr()
}

// OnRegistry is ref with its registry replaced by registry (a mirror's "host[:port]"),
// keeping the repository and the tag or digest.
func OnRegistry(ref, registry string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", errdefs.Invalid("invalid image reference %q", ref)
	}
	sep := ":"
	if _, ok := r.(name.Digest); ok {
		sep = "@"
	}
	return registry + "/" + r.Context().RepositoryStr() + sep + r.Identifier(), nil
}
