package manager

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"slices"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// PortCloser cuts the open connections of an exposed port; the server implements it.
type PortCloser func(sandboxID string, port int)

// SetPortCloser tells the manager how to cut an exposed port's connections.
func (m *Manager) SetPortCloser(f PortCloser) { m.closePort = f }

// ExposePort makes a sandbox port reachable through the daemon's listener: with a token
// unless public. Exposing an exposed port again returns it (and may change public).
func (m *Manager) ExposePort(ctx context.Context, call Call, ref string, port int, public bool) (*store.Port, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.Invalid("port %d is out of range: 1 to 65535", port)
	}
	var out store.Port
	_, _, err := m.lifecycleOpBody(ctx, call, ref, "expose", map[string]any{"port": port, "public": public},
		func(ctx context.Context, sb *store.Sandbox, _ *store.Operation) error {
			if err := m.may(VerbNetwork, sb); err != nil {
				return err
			}
			i := slices.IndexFunc(sb.Ports, func(p store.Port) bool { return p.Port == port })
			if i < 0 {
				if len(sb.Ports) >= 32 {
					return errdefs.Invalid("at most 32 ports may be exposed per sandbox")
				}
				var b [16]byte
				rand.Read(b[:])
				sb.Ports = append(sb.Ports, store.Port{Port: port, Token: hex.EncodeToString(b[:])})
				i = len(sb.Ports) - 1
			}
			sb.Ports[i].Public = public
			out = sb.Ports[i]
			if err := m.store.UpdateSandbox(ctx, sb); err != nil {
				return err
			}
			m.event(sb, "port", "expose", map[string]any{"port": port, "public": public})
			return nil
		})
	return &out, err
}

// ClosePort withdraws an exposed port and cuts its open connections.
func (m *Manager) ClosePort(ctx context.Context, call Call, ref string, port int) error {
	_, _, err := m.lifecycleOpBody(ctx, call, ref, "close_port", map[string]any{"port": port},
		func(ctx context.Context, sb *store.Sandbox, _ *store.Operation) error {
			if err := m.may(VerbNetwork, sb); err != nil {
				return err
			}
			i := slices.IndexFunc(sb.Ports, func(p store.Port) bool { return p.Port == port })
			if i < 0 {
				return errdefs.NotFound("port %d of sandbox %q is not exposed", port, sb.Name)
			}
			sb.Ports = slices.Delete(sb.Ports, i, i+1)
			if err := m.store.UpdateSandbox(ctx, sb); err != nil {
				return err
			}
			if m.closePort != nil {
				m.closePort(sb.ID, port)
			}
			m.event(sb, "port", "close", map[string]any{"port": port})
			return nil
		})
	return err
}

// PortDialer connects to an exposed port inside its sandbox.
type PortDialer func(ctx context.Context) (net.Conn, error)

// OpenPort checks that sandboxID exposes port and that token opens it (unless public),
// then that the sandbox may be used (VerbUse), resumes it if it is suspended, and
// returns what connects to the port.
func (m *Manager) OpenPort(ctx context.Context, sandboxID string, port int, token string) (PortDialer, error) {
	sb, err := m.store.GetSandbox(ctx, sandboxID)
	if err != nil {
		return nil, errdefs.NotFound("no such exposed port")
	}
	i := slices.IndexFunc(sb.Ports, func(p store.Port) bool { return p.Port == port })
	if i < 0 {
		return nil, errdefs.NotFound("no such exposed port")
	}
	if p := sb.Ports[i]; !p.Public && subtle.ConstantTimeCompare([]byte(p.Token), []byte(token)) != 1 {
		return nil, &errdefs.Error{Class: errdefs.ErrUnauthenticated, Msg: "this port needs its token (X-Airlock-Port-Token header or airlock_token query parameter)"}
	}
	// Only a caller the port admits hears the sandbox's state.
	if err := m.may(VerbUse, sb); err != nil {
		return nil, err
	}
	m.touch(sb.ID)
	if sb, err = m.ensureRunning(ctx, sb); err != nil {
		return nil, err
	}
	pd, ok := m.driver(sb).(runtime.PortDialer)
	if !ok {
		return nil, errdefs.Unavailable("the runtime of sandbox %q cannot reach its ports", sb.Name)
	}
	id := sb.ID
	return func(ctx context.Context) (net.Conn, error) { return pd.DialPort(ctx, id, port) }, nil
}

// Touch counts inbound traffic on an open connection to an exposed port.
func (m *Manager) Touch(sandboxID string) { m.touch(sandboxID) }
