package image

import "github.com/google/go-containerregistry/pkg/name"

// RegistryOf is the registry ("host" or "host:port") a reference names, Docker Hub's
// "index.docker.io" for a reference that names none; "" when ref does not parse.
func RegistryOf(ref string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Context().RegistryStr()
}
