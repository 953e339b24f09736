package manager

import (
	"context"
	"net/netip"
	"slices"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// SessionTokenPath is where every sandbox finds its session credential for the API.
const SessionTokenPath = netattach.SessionTokenPath

// SetNetwork gives the manager the node's network; without one, sandboxes get a
// namespace with loopback only.
func (m *Manager) SetNetwork(n netattach.Network) { m.net = n }

// DefaultNetwork is the policy of a sandbox created without one.
var DefaultNetwork = store.Network{Mode: string(egress.ModeBaseline)}

// parsePolicy checks a stored or requested policy and turns it into the proxy's form.
func parsePolicy(n store.Network) (egress.Policy, error) {
	if n.Mode == "" {
		n.Mode = DefaultNetwork.Mode
	}
	pol := egress.Policy{Mode: egress.Mode(n.Mode)}
	if len(n.Allow) > 0 && pol.Mode == egress.ModeBaseline {
		pol.Mode = egress.ModeAllowlist // rules imply the allowlist mode
	}
	if len(n.Allow) > 64 || len(n.AllowPrivate) > 16 {
		return pol, errdefs.Invalid("at most 64 allow rules and 16 allow_private prefixes")
	}
	for _, a := range n.Allow {
		r, err := egress.ParseRule(a)
		if err != nil {
			return pol, err
		}
		pol.Rules = append(pol.Rules, r)
	}
	for _, p := range n.AllowPrivate {
		pf, err := netip.ParsePrefix(p)
		if err != nil {
			if a, aerr := netip.ParseAddr(p); aerr == nil {
				pf = netip.PrefixFrom(a, a.BitLen())
			} else {
				return pol, errdefs.Invalid("invalid allow_private %q: a CIDR prefix such as 10.1.2.0/24 or an address", p)
			}
		}
		pol.AllowPrivate = append(pol.AllowPrivate, pf)
	}
	return pol, pol.Validate()
}

// normalNetwork is the stored form of a valid policy.
func normalNetwork(n store.Network) (store.Network, error) {
	pol, err := parsePolicy(n)
	if err != nil {
		return n, err
	}
	out := store.Network{Mode: string(pol.Mode)}
	for _, r := range pol.Rules {
		out.Allow = append(out.Allow, r.String())
	}
	for _, p := range pol.AllowPrivate {
		out.AllowPrivate = append(out.AllowPrivate, p.String())
	}
	return out, nil
}

// attach starts making sb's network and gives spec a hook that waits for it: the driver
// calls the hook once the sandbox's filesystem is ready, so the two are built at once.
// wait returns the attach's outcome; after a failed start the caller waits before it
// detaches, so that no network is made after it was removed.
// files are mounts the container gets besides the network's (delivered secrets).
func (m *Manager) attach(ctx context.Context, sb *store.Sandbox, spec *runtime.Spec, files []runtime.Mount) (wait func() error, err error) {
	if m.net == nil {
		if len(files) > 0 {
			spec.Network = func() (runtime.NetworkJoin, error) { return runtime.NetworkJoin{Mounts: files}, nil }
		}
		return func() error { return nil }, nil
	}
	pol, err := parsePolicy(sb.Network)
	if err != nil {
		return nil, err
	}
	var att *netattach.Attachment
	var attErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if att, attErr = m.net.Attach(ctx, sb, pol); attErr != nil {
			attErr = errdefs.Unavailable("the network of sandbox %q could not be set up", sb.Name).WithCause(attErr)
		}
	}()
	wait = func() error { <-done; return attErr }
	spec.Network = func() (runtime.NetworkJoin, error) {
		if err := wait(); err != nil {
			return runtime.NetworkJoin{}, err
		}
		return runtime.NetworkJoin{NetnsPath: att.NetnsPath, Env: att.Env, Mounts: append(slices.Clip(att.Mounts), files...),
			Joined: m.netJoined(sb.ID)}, nil
	}
	return wait, nil
}

// netJoined is what the driver calls once sandbox id's container holds its network
// namespace: the network drops its own hold (a host mount each running sandbox would
// keep otherwise, read and copied by every later container start).
func (m *Manager) netJoined(id string) func() {
	j, ok := m.net.(netattach.Joiner)
	if !ok {
		return nil
	}
	return func() {
		if err := j.Joined(id); err != nil {
			m.log.Warn("release the network namespace's mount", "sandbox", id, "err", err)
		}
	}
}

// detach ends a sandbox's secret delivery, workspace and volume mounts, and network.
func (m *Manager) detach(ctx context.Context, id string) error {
	m.stopSecrets(id)
	m.unmountWorkspace(id)
	m.unmountVolumes(id)
	if m.net == nil {
		return nil
	}
	if err := m.net.Detach(ctx, id); err != nil {
		m.log.Warn("remove sandbox network", "sandbox", id, "err", err)
		return err
	}
	return nil
}

// SetNetworkPolicy changes a sandbox's egress policy; new connections follow it at
// once. Moving to or from mode none changes interfaces, so it applies at the next start.
func (m *Manager) SetNetworkPolicy(ctx context.Context, call Call, ref string, n store.Network) (*store.Operation, *store.Sandbox, error) {
	norm, err := normalNetwork(n)
	if err != nil {
		return nil, nil, err
	}
	return m.lifecycleOpBody(ctx, call, ref, "network", norm, func(ctx context.Context, sb *store.Sandbox, _ *store.Operation) error {
		if err := m.may(VerbNetwork, sb); err != nil {
			return err
		}
		old := sb.Network
		sb.Network = norm
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		restart := (old.Mode == string(egress.ModeNone)) != (norm.Mode == string(egress.ModeNone))
		if m.net != nil && sb.State == Running && !restart {
			pol, _ := parsePolicy(norm)
			m.net.SetPolicy(sb.ID, sb.Generation, pol)
		}
		m.event(sb, "network", "policy", map[string]any{"mode": norm.Mode, "allow": norm.Allow,
			"allow_private": norm.AllowPrivate, "applies_at_next_start": restart && sb.State == Running})
		return nil
	})
}

// NetworkLeftovers lists sandbox ids with network resources but no live record.
func (m *Manager) networkLeftovers(ctx context.Context) []string {
	if m.net == nil {
		return nil
	}
	ids, err := m.net.List()
	if err != nil {
		return nil
	}
	var out []string
	for _, id := range ids {
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil || !slices.Contains([]State{Running, Creating, Resuming}, sb.State) {
			out = append(out, id)
		}
	}
	return out
}
