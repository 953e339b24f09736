package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/api"
)

// WhoAmI returns the caller, its roles and its permissions.
func (c *Client) WhoAmI(ctx context.Context) (*api.WhoAmI, error) {
	var out api.WhoAmI
	return &out, c.do(ctx, request{method: http.MethodGet, path: "/v1/whoami"}, &out)
}

// Users lists the node's identities (admin).
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	var out api.UserList
	return out.Users, c.do(ctx, request{method: http.MethodGet, path: "/v1/users"}, &out)
}

// CreateUser adds a user or service account (admin).
func (c *Client) CreateUser(ctx context.Context, req api.CreateUserRequest) (*api.User, error) {
	var out api.User
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/users", in: req}, &out)
}

// DeleteUser removes an identity and its tokens (admin).
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/users/" + url.PathEscape(name)}, nil)
}

// SetUserRoles replaces an identity's roles (admin).
func (c *Client) SetUserRoles(ctx context.Context, name string, roles []string) (*api.User, error) {
	var out api.User
	return &out, c.do(ctx, request{method: http.MethodPut, path: "/v1/users/" + url.PathEscape(name) + "/roles",
		in: api.RolesRequest{Roles: roles}}, &out)
}

// Roles lists the built-in and custom roles.
func (c *Client) Roles(ctx context.Context) ([]api.Role, error) {
	var out api.RoleList
	return out.Roles, c.do(ctx, request{method: http.MethodGet, path: "/v1/roles"}, &out)
}

// PutRole creates or replaces a custom role (admin).
func (c *Client) PutRole(ctx context.Context, name string, perms []string) (*api.Role, error) {
	var out api.Role
	return &out, c.do(ctx, request{method: http.MethodPut, path: "/v1/roles/" + url.PathEscape(name),
		in: api.RoleRequest{Permissions: perms}}, &out)
}

// DeleteRole removes a custom role (admin).
func (c *Client) DeleteRole(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/roles/" + url.PathEscape(name)}, nil)
}

// Tokens lists API tokens, of user or of everyone for "" (admin).
func (c *Client) Tokens(ctx context.Context, user string) ([]api.Token, error) {
	var out api.TokenList
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	return out.Tokens, c.do(ctx, request{method: http.MethodGet, path: "/v1/tokens", query: q}, &out)
}

// CreateToken makes an API token; its Secret is in this answer only (admin).
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (*api.Token, error) {
	var out api.Token
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/tokens", in: req}, &out)
}

// RevokeToken revokes a token at once (admin).
func (c *Client) RevokeToken(ctx context.Context, id string) (*api.Token, error) {
	var out api.Token
	return &out, c.do(ctx, request{method: http.MethodDelete, path: "/v1/tokens/" + url.PathEscape(id)}, &out)
}

// AuditFilter selects audit records.
type AuditFilter struct {
	Identity, Action, Sandbox string
	Since                     time.Time
	After                     int64 // records after this sequence number
}

// AuditLog lists audit records in order, up to 1000 after f.After: an administrator's
// of everyone, anyone else's of its own calls (audit.read).
func (c *Client) AuditLog(ctx context.Context, f AuditFilter) ([]api.AuditRecord, error) {
	q := url.Values{}
	for k, v := range map[string]string{"identity": f.Identity, "action": f.Action, "sandbox": f.Sandbox} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if f.After > 0 {
		q.Set("after", strconv.FormatInt(f.After, 10))
	}
	var out api.AuditList
	return out.Records, c.do(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q}, &out)
}

// VerifyAudit checks the whole hash chain and names the first record at fault (admin).
func (c *Client) VerifyAudit(ctx context.Context) (*api.AuditVerify, error) {
	var out api.AuditVerify
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/audit/verify"}, &out)
}
