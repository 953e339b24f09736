package manager

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
)

// SetSecrets gives the manager the node's secrets and their delivery; without them,
// binding a secret is refused.
func (m *Manager) SetSecrets(svc *secret.Service, d *secret.Delivery) {
	m.secrets, m.delivery = svc, d
}

// BindResult is a binding made, and when it reaches the sandbox.
type BindResult struct {
	Secret  *secret.Secret
	Binding *secret.Binding
	// Applies says when the sandbox sees it: "now", or "at the next start" for a file
	// bound to a running sandbox whose runtime cannot add a mount to it (gVisor).
	Applies string
}

// BindSecret hands one of owner's secrets to one of owner's sandboxes. The binding's
// hosts must be ones the sandbox's policy lets a secret open: a sandbox in network mode
// none has no proxy to substitute a value, and loopback, private and metadata
// addresses stay closed whatever a secret says.
func (m *Manager) BindSecret(ctx context.Context, owner, ref string, req secret.BindRequest) (*BindResult, error) {
	if m.secrets == nil {
		return nil, errdefs.Unavailable("this node keeps no secrets")
	}
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return nil, err
	}
	if err := m.may(VerbSecret, sb); err != nil {
		return nil, err
	}
	pol, err := parsePolicy(sb.Network)
	if err != nil {
		return nil, err
	}
	if (req.Delivery == "" || req.Delivery == secret.DeliverProxy) && pol.Mode == egress.ModeNone {
		return nil, errdefs.Precondition("sandbox %q is in network mode none, which has no egress proxy to substitute a secret "+
			"(rule: mode none); deliver it as a file or env, or change the sandbox's network mode", sb.Name)
	}
	hosts := req.Hosts
	if len(hosts) == 0 { // the binding takes the secret's own hosts
		sec, err := m.secrets.Get(ctx, owner, req.Secret)
		if err != nil {
			return nil, err
		}
		hosts = sec.AllowedHosts
	}
	for _, h := range hosts {
		if err := bindableHost(h, pol); err != nil {
			return nil, err
		}
	}
	req.Sandbox = sb.ID
	sec, b, err := m.secrets.Bind(ctx, owner, req)
	if err != nil {
		return nil, err
	}
	res := &BindResult{Secret: sec, Binding: b, Applies: "now"}
	if strings.HasPrefix(b.Target, "/") && sb.State != Suspended && sb.State != Creating && !m.mountSecret(ctx, sb, b) {
		res.Applies = "at the next start"
	}
	m.event(sb, "secret", "bound", map[string]any{"secret": sec.Name, "target": b.Target, "delivery": b.Delivery})
	return res, nil
}

// mountSecret puts the file of a binding made while sb runs at its target at once, and
// says whether it did; when the runtime cannot, the file appears at the next start.
func (m *Manager) mountSecret(ctx context.Context, sb *store.Sandbox, b *secret.Binding) bool {
	fm, ok := m.driver(sb).(runtime.FileMounter)
	if !ok || m.delivery == nil || sb.State != Running {
		return false
	}
	mnt, ok, err := m.delivery.Deliver(ctx, sb.Owner, sb.ID, b.ID, sb.UIDBase)
	if err == nil && ok {
		err = fm.MountFile(ctx, sb.ID, mnt.Source, mnt.Destination)
	}
	if err != nil {
		m.log.Warn("a secret bound to a running sandbox waits for its next start", "sandbox", sb.ID, "target", b.Target, "err", err)
		return false
	}
	return ok
}

// bindableHost refuses a binding host the sandbox's policy keeps closed.
func bindableHost(h string, pol egress.Policy) error {
	name := strings.TrimPrefix(h, "*.")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return errdefs.Precondition("host %q is loopback, which stays denied in every network mode (rule: protected range loopback)", h)
	}
	if name == egress.APIHost {
		return errdefs.Precondition("host %q is the Airlock API, reached with the sandbox's session credential, never with a secret", h)
	}
	if addr, ok := egress.ParseHostLiteral(name); ok {
		if class, why := egress.Classify(addr); class != egress.Public && !slices.ContainsFunc(pol.AllowPrivate, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			return errdefs.Precondition("host %q is %s, which the sandbox's policy keeps closed (rule: protected range %s; allow it with allow_private)", h, why, class)
		}
	}
	return nil
}

// UnbindSecret removes owner's bindings of secret name to a sandbox (only the one at
// target, if given); delivery through the proxy and files stop at once.
func (m *Manager) UnbindSecret(ctx context.Context, owner, ref, name, target string) (int, error) {
	if m.secrets == nil {
		return 0, errdefs.Unavailable("this node keeps no secrets")
	}
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return 0, err
	}
	_, n, err := m.secrets.Unbind(ctx, owner, name, sb.ID, target)
	if err == nil {
		m.event(sb, "secret", "unbound", map[string]any{"secret": name, "target": target})
	}
	return n, err
}

// deliverSecrets readies a starting sandbox's secrets (running: one a restarted daemon
// found running, which keeps the versions it was given) and returns the mounts of its
// delivered files.
func (m *Manager) deliverSecrets(ctx context.Context, sb *store.Sandbox, running bool) ([]runtime.Mount, error) {
	if m.delivery == nil {
		return nil, nil
	}
	start := m.delivery.Start
	if running {
		start = m.delivery.Resume
	}
	files, err := start(ctx, sb.Owner, sb.ID, sb.UIDBase)
	if err != nil {
		return nil, errdefs.Unavailable("the secrets of sandbox %q could not be delivered", sb.Name).WithCause(err)
	}
	mounts := make([]runtime.Mount, 0, len(files))
	for _, f := range files {
		mounts = append(mounts, runtime.Mount{Source: f.Source, Destination: f.Destination, ReadOnly: true})
	}
	return mounts, nil
}

// stopSecrets ends the delivery to a sandbox that stopped.
func (m *Manager) stopSecrets(id string) {
	if m.delivery != nil {
		m.delivery.Stop(id)
	}
}

// ProcessEnv is the environment of a new process in sb (an exec, a session, a
// terminal): the sandbox's own variables (its container started with them, but a pooled
// sandbox's container started before its claimer gave them), then the variables its
// secret bindings deliver, then the caller's own; a later one wins over an earlier one of
// the same name.
func (m *Manager) ProcessEnv(ctx context.Context, sb *store.Sandbox, requested []string) ([]string, error) {
	env, err := m.secretEnv(ctx, sb, requested)
	if err != nil {
		return nil, err
	}
	return append(dropNamed(sortedEnv(sb.Env), env), env...), nil
}

// dropNamed removes from env the variables that by names too.
func dropNamed(env, by []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(by, func(r string) bool { return strings.HasPrefix(r, k+"=") })
	})
}

// secretEnv is what sb's secret bindings deliver, less the names requested names, then
// requested.
func (m *Manager) secretEnv(ctx context.Context, sb *store.Sandbox, requested []string) ([]string, error) {
	if m.delivery == nil {
		return requested, nil
	}
	env, err := m.delivery.ExecEnv(ctx, sb.Owner, sb.ID)
	if err != nil {
		return nil, errdefs.Unavailable("the secrets of sandbox %q could not be delivered", sb.Name).WithCause(err)
	}
	if len(env) == 0 {
		return requested, nil
	}
	return append(dropNamed(env, requested), requested...), nil
}
