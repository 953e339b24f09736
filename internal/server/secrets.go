package server

import (
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/secret"
)

func toAPISecret(s *secret.Secret) api.Secret {
	out := api.Secret{Name: s.Name, Type: s.Type, Description: s.Description, AllowedHosts: append([]string{}, s.AllowedHosts...),
		CreatedAt: s.CreatedAt, Versions: []api.SecretVersion{}}
	if !s.ExpiresAt.IsZero() {
		t := s.ExpiresAt
		out.ExpiresAt = &t
	}
	if !s.RevokedAt.IsZero() {
		t := s.RevokedAt
		out.RevokedAt = &t
	}
	for _, v := range s.Versions {
		out.Versions = append(out.Versions, api.SecretVersion{Version: v.Version, CreatedAt: v.CreatedAt,
			Preview: v.Preview, Fingerprint: v.Fingerprint, Size: v.Size})
	}
	out.Bindings = []api.SecretBinding{}
	for _, b := range s.Bindings {
		out.Bindings = append(out.Bindings, toAPIBinding(b))
	}
	return out
}

// envRisk is what the API says of env delivery, the higher-risk choice.
const envRisk = "high: the value itself is in every execution's environment, where any process in the sandbox can read and print it; prefer proxy or file delivery"

func toAPIBinding(b secret.Binding) api.SecretBinding {
	out := api.SecretBinding{ID: b.ID, Sandbox: b.Sandbox, Scope: b.Scope, Target: b.Target, Delivery: b.Delivery,
		Hosts: b.Hosts, Query: b.Query, Headers: b.Headers, Created: b.CreatedAt}
	if b.Delivery == secret.DeliverEnv {
		out.Risk = envRisk
	}
	return out
}

func (s *Server) bindSecret(w http.ResponseWriter, r *http.Request) error {
	var req api.BindSecretRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Sandbox == "" {
		return errdefs.Invalid("a binding needs the sandbox (name or id) to hand the secret to")
	}
	res, err := s.m.BindSecret(r.Context(), owner(r), req.Sandbox, secret.BindRequest{Secret: r.PathValue("name"),
		Scope: req.Scope, Target: req.Target, Delivery: req.Delivery, Hosts: req.Hosts, Query: req.Query, Headers: req.Headers})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.BindSecretResult{Binding: toAPIBinding(*res.Binding), Applies: res.Applies})
	return nil
}

func (s *Server) unbindSecret(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Get("sandbox") == "" {
		return errdefs.Invalid("unbinding needs the sandbox (?sandbox=NAME)")
	}
	n, err := s.m.UnbindSecret(r.Context(), owner(r), q.Get("sandbox"), r.PathValue("name"), q.Get("target"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.UnbindSecretResult{Removed: n})
	return nil
}

func (s *Server) secrets() (*secret.Service, error) {
	if s.opts.Secrets == nil {
		return nil, errdefs.Unavailable("this node keeps no secrets")
	}
	return s.opts.Secrets, nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	list, err := svc.List(r.Context(), owner(r))
	if err != nil {
		return err
	}
	out := api.SecretList{Secrets: []api.Secret{}}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, toAPISecret(sec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	var req api.CreateSecretRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	var expires time.Time
	if req.Expires != "" {
		if d, derr := time.ParseDuration(req.Expires); derr == nil && d > 0 {
			expires = time.Now().Add(d)
		} else if expires, err = time.Parse(time.RFC3339, req.Expires); err != nil {
			return errdefs.Invalid("invalid expires %q: an RFC 3339 time or a duration such as 720h", req.Expires)
		}
	}
	sec, err := svc.Create(r.Context(), owner(r), secret.CreateRequest{Name: req.Name, Type: req.Type,
		Description: req.Description, AllowedHosts: req.AllowedHosts, ExpiresAt: expires, Value: []byte(req.Value)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toAPISecret(sec))
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	sec, err := svc.Get(r.Context(), owner(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISecret(sec))
	return nil
}

func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	var req api.RotateSecretRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	sec, err := svc.Rotate(r.Context(), owner(r), r.PathValue("name"), []byte(req.Value))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISecret(sec))
	return nil
}

func (s *Server) revokeSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	if purge := r.URL.Query().Get("purge"); purge == "true" {
		if err := svc.Delete(r.Context(), owner(r), r.PathValue("name")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	} else if purge != "" && purge != "false" {
		return errdefs.Invalid("invalid purge %q: true or false", purge)
	}
	sec, err := svc.Revoke(r.Context(), owner(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISecret(sec))
	return nil
}

func (s *Server) rekeySecrets(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secrets()
	if err != nil {
		return err
	}
	n, err := svc.Rekey(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.RekeyResult{Secrets: n})
	return nil
}
