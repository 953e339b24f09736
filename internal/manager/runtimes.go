package manager

import (
	"context"
	"net"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
)

func (c Config) runtimeName() string {
	if c.DefaultRuntime == "" {
		return "runc"
	}
	return c.DefaultRuntime
}

// checkRuntime says whether name (or the default, for "") is a runtime of this node.
func (m *Manager) checkRuntime(name string) error {
	if name == "" {
		return nil
	}
	if _, ok := m.drivers[name]; !ok {
		return errdefs.Invalid("unknown runtime %q; this node runs %v", name, m.Runtimes())
	}
	return nil
}

// mountsWorkspace says whether the runtime name (or the default, for "") gives its
// containers a host workspace (runtime.WorkspaceMounter).
func (m *Manager) mountsWorkspace(name string) bool {
	if name == "" {
		name = m.defaultRuntime
	}
	wm, ok := m.drivers[name].(runtime.WorkspaceMounter)
	return ok && wm.MountsWorkspace()
}

// workspaceRuntimes names this node's runtimes that mount a host workspace.
func (m *Manager) workspaceRuntimes() []string {
	var out []string
	for _, name := range m.Runtimes() {
		if m.mountsWorkspace(name) {
			out = append(out, name)
		}
	}
	return out
}

// missingRuntime is the driver of a sandbox whose runtime this node does not have.
type missingRuntime string

func (r missingRuntime) err() error {
	return errdefs.Unavailable("the sandbox's runtime %q is not available on this node", string(r))
}
func (r missingRuntime) Start(context.Context, runtime.Spec) error { return r.err() }
func (r missingRuntime) Stop(context.Context, string) error        { return r.err() }
func (r missingRuntime) Delete(context.Context, string) error      { return r.err() }
func (r missingRuntime) Status(context.Context, string) (runtime.Status, error) {
	return "", r.err()
}
func (r missingRuntime) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{}, r.err()
}
func (r missingRuntime) DialAgent(context.Context, string) (net.Conn, error) { return nil, r.err() }
func (r missingRuntime) List(context.Context) ([]string, error)              { return nil, nil }
