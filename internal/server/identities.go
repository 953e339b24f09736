package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
)

func toAPIUser(id *auth.Identity) api.User {
	return api.User{Name: id.Name, Kind: id.Kind, Roles: id.Roles, UIDs: id.UIDs, CreatedAt: id.CreatedAt}
}

func toAPIToken(t *auth.Token) api.Token {
	out := api.Token{ID: t.ID, User: t.Identity, Name: t.Name, Prefix: t.Prefix, CreatedAt: t.CreatedAt}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		out.ExpiresAt = &e
	}
	if !t.RevokedAt.IsZero() {
		r := t.RevokedAt
		out.RevokedAt = &r
	}
	return out
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	ids, err := s.opts.Auth.ListIdentities(r.Context())
	if err != nil {
		return err
	}
	out := api.UserList{Users: []api.User{}}
	for _, id := range ids {
		out.Users = append(out.Users, toAPIUser(id))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateUserRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id, err := s.opts.Auth.CreateIdentity(r.Context(), req.Name, req.Kind, req.Roles, req.UIDs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toAPIUser(id))
	return nil
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	if err := s.opts.Auth.DeleteIdentity(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setUserRoles(w http.ResponseWriter, r *http.Request) error {
	var req api.RolesRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id, err := s.opts.Auth.SetRoles(r.Context(), r.PathValue("name"), req.Roles)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIUser(id))
	return nil
}

func (s *Server) listRoles(w http.ResponseWriter, r *http.Request) error {
	roles, err := s.opts.Auth.ListRoles(r.Context())
	if err != nil {
		return err
	}
	out := api.RoleList{Roles: []api.Role{}}
	for _, ro := range roles {
		out.Roles = append(out.Roles, api.Role{Name: ro.Name, Permissions: ro.Permissions, Builtin: ro.Builtin})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) putRole(w http.ResponseWriter, r *http.Request) error {
	var req api.RoleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	ro, err := s.opts.Auth.PutRole(r.Context(), r.PathValue("name"), req.Permissions)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.Role{Name: ro.Name, Permissions: ro.Permissions})
	return nil
}

func (s *Server) deleteRole(w http.ResponseWriter, r *http.Request) error {
	if err := s.opts.Auth.DeleteRole(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.opts.Auth.ListTokens(r.Context(), r.URL.Query().Get("user"))
	if err != nil {
		return err
	}
	out := api.TokenList{Tokens: []api.Token{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, toAPIToken(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	ttl, err := auth.ParseTTL(req.Expires)
	if err != nil {
		return errdefs.Invalid("expires %q: %v", req.Expires, err)
	}
	secret, t, err := s.opts.Auth.CreateTokenFormat(r.Context(), req.User, req.Name, req.Format, ttl)
	if err != nil {
		return err
	}
	out := toAPIToken(t)
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.opts.Auth.RevokeToken(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIToken(t))
	return nil
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	out := api.WhoAmI{User: p.Identity, Roles: p.Roles, Permissions: []string{}, Sandbox: p.Sandbox}
	for _, perm := range p.Permissions() {
		out.Permissions = append(out.Permissions, string(perm))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
