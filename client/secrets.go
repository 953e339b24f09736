package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

// Secrets lists the caller's secrets (metadata only).
func (c *Client) Secrets(ctx context.Context) ([]api.Secret, error) {
	var out api.SecretList
	return out.Secrets, c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets"}, &out)
}

// CreateSecret stores a secret; the answer holds its metadata, never its value.
func (c *Client) CreateSecret(ctx context.Context, req api.CreateSecretRequest) (*api.Secret, error) {
	var out api.Secret
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/secrets", in: req}, &out)
}

// Secret returns one of the caller's secrets (metadata only).
func (c *Client) Secret(ctx context.Context, name string) (*api.Secret, error) {
	var out api.Secret
	return &out, c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets/" + url.PathEscape(name)}, &out)
}

// RotateSecret adds a new version of a secret.
func (c *Client) RotateSecret(ctx context.Context, name, value string) (*api.Secret, error) {
	var out api.Secret
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/secrets/" + url.PathEscape(name) + "/rotate",
		in: api.RotateSecretRequest{Value: value}}, &out)
}

// RevokeSecret revokes a secret at once; its values are destroyed.
func (c *Client) RevokeSecret(ctx context.Context, name string) (*api.Secret, error) {
	var out api.Secret
	return &out, c.do(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + url.PathEscape(name)}, &out)
}

// DeleteSecret revokes a secret, if it is not revoked yet, and removes it with its
// bindings; its name can be used again.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + url.PathEscape(name),
		query: url.Values{"purge": {"true"}}}, nil)
}

// RekeySecrets re-seals every secret under a new node key (admin).
func (c *Client) RekeySecrets(ctx context.Context) (*api.RekeyResult, error) {
	var out api.RekeyResult
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/secrets/rekey"}, &out)
}

// BindSecret hands one of the caller's secrets to one of its sandboxes.
func (c *Client) BindSecret(ctx context.Context, name string, req api.BindSecretRequest) (*api.BindSecretResult, error) {
	var out api.BindSecretResult
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/secrets/" + url.PathEscape(name) + "/bindings", in: req}, &out)
}

// UnbindSecret removes a secret's bindings to a sandbox (only the one at target, if
// target is set); delivery stops at once.
func (c *Client) UnbindSecret(ctx context.Context, name, sandbox, target string) (int, error) {
	q := url.Values{"sandbox": {sandbox}}
	if target != "" {
		q.Set("target", target)
	}
	var out api.UnbindSecretResult
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + url.PathEscape(name) + "/bindings", query: q}, &out)
	return out.Removed, err
}
