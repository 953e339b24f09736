package daemon

import (
	"context"
	"log/slog"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/store"
)

// setPools sets the configuration's pools, as the node's administrator; one that cannot
// be set (its image is not here yet) is logged and the others go on.
func setPools(ctx context.Context, m *manager.Manager, pools []config.PoolSetting, log *slog.Logger) {
	for _, p := range pools {
		l := p.Limits
		_, err := m.SetPool(ctx, manager.Call{Owner: config.LocalOwner, Admin: true}, manager.PoolRequest{
			Name: p.Name, Image: p.Image, Runtime: p.Runtime, Network: p.Network, Size: p.Size,
			Limits: store.Limits{CPU: l.CPU, Memory: p.Memory, PIDs: l.PIDs, OpenFiles: l.OpenFiles, Disk: p.Disk}})
		if err != nil {
			log.Error("a pool of the configuration is not set", "pool", p.Name, "err", err)
		}
	}
}
