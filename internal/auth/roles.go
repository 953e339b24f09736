// Package auth owns who a caller is and what it may do: identities (users and service
// accounts), roles (named sets of permissions, built in or custom), API tokens (shown
// once, kept only as a SHA-256 hash, expiring and revocable), the mapping of a unix
// socket peer's uid to an identity, and the first start's administrator. The HTTP edge
// asks it for the principal of every request and checks the route's permission.
//
// Hostile surfaces it guards: a bearer token is compared only through its hash, and a
// wrong, expired or revoked one, or one whose identity is gone, is refused the same
// way; a revocation is effective on the next request (tokens are never cached; an
// identity's principal is, and every change to identities or roles, all made through
// this package, drops it before the change returns); a uid the node does not map is
// refused, never guessed.
//
// It must not import the manager, the server or the runtime.
package auth

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/store"
)

// Permission is one thing a role allows.
type Permission string

// The permissions.
const (
	SandboxCreate  Permission = "sandbox.create"
	SandboxRead    Permission = "sandbox.read"
	SandboxExec    Permission = "sandbox.exec"
	SandboxFiles   Permission = "sandbox.files"
	SandboxNetwork Permission = "sandbox.network"
	SandboxAdmin   Permission = "sandbox.admin" // every identity's sandboxes, by id, and the node's housekeeping (gc)
	SnapshotCreate Permission = "snapshot.create"
	SnapshotRead   Permission = "snapshot.read"
	SnapshotDelete Permission = "snapshot.delete"
	ImageRead      Permission = "image.read"
	ImageCreate    Permission = "image.create"
	ImageDelete    Permission = "image.delete"
	SecretCreate   Permission = "secret.create"
	SecretBind     Permission = "secret.bind"
	AuditRead      Permission = "audit.read"
	MetricsRead    Permission = "metrics.read" // the node's Prometheus metrics (GET /metrics): every owner's sandboxes counted
	Admin          Permission = "admin"        // every permission, and the node's identities
)

// Permissions lists every permission.
var Permissions = []Permission{SandboxCreate, SandboxRead, SandboxExec, SandboxFiles, SandboxNetwork, SandboxAdmin,
	SnapshotCreate, SnapshotRead, SnapshotDelete, ImageRead, ImageCreate, ImageDelete, SecretCreate, SecretBind,
	AuditRead, MetricsRead, Admin}

// BuiltinRoles are the roles every node has; custom roles cannot take their names.
var BuiltinRoles = map[string][]string{
	"admin": {string(Admin)},
	"developer": {"sandbox.create", "sandbox.read", "sandbox.exec", "sandbox.files", "sandbox.network",
		"snapshot.*", "image.*", "secret.create", "secret.bind"},
	"viewer": {"sandbox.read", "snapshot.read", "image.read", "audit.read"},
	"agent":  {"sandbox.create", "sandbox.read", "sandbox.exec", "sandbox.files", "snapshot.create", "snapshot.read", "image.read"},
}

// expand turns a role's entries ("snapshot.*" included) into permissions; an unknown
// entry is an error naming it.
func expand(entries []string) (map[Permission]bool, error) {
	out := map[Permission]bool{}
	for _, e := range entries {
		if prefix, ok := strings.CutSuffix(e, ".*"); ok {
			n := 0
			for _, p := range Permissions {
				if strings.HasPrefix(string(p), prefix+".") {
					out[p] = true
					n++
				}
			}
			if n == 0 {
				return nil, fmt.Errorf("unknown permission %q; permissions are %s", e, list())
			}
			continue
		}
		if !slices.Contains(Permissions, Permission(e)) {
			return nil, fmt.Errorf("unknown permission %q; permissions are %s", e, list())
		}
		out[Permission(e)] = true
	}
	return out, nil
}

func list() string {
	var s []string
	for _, p := range Permissions {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ") + " (and prefix.* for a group)"
}

// Principal is an authenticated caller: its identity and what its roles allow.
type Principal struct {
	Identity string
	Roles    []string
	// Sandbox is set when the caller is code inside this sandbox, acting through its
	// session credential.
	Sandbox string
	// TokenID is the API token the caller showed, when it showed one: what a
	// credential derived from it (a sandbox's E2B access token) is checked against on
	// each use.
	TokenID string
	perms   map[Permission]bool
}

// Can says whether the principal holds p (admin holds everything).
func (p *Principal) Can(perm Permission) bool {
	return p != nil && (p.perms[Admin] || p.perms[perm])
}

// Permissions lists what the principal holds, sorted.
func (p *Principal) Permissions() []Permission {
	return slices.Sorted(maps.Keys(p.perms))
}

// The records the service hands out, named here so that its callers (the HTTP edge)
// need not import the store.
type (
	Identity = store.Identity
	Token    = store.Token
)
