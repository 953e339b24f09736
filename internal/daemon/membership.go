package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/clustertls"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/membership"
	"github.com/airlockhq/airlock/internal/store"
)

// instanceFile holds the identity of the state directory a node runs on: a node that
// restarts on it takes its own lease back at once.
const instanceFile = "node.instance"

// joinCluster takes the node's membership lease in its store, which a clean Close gives
// back. Renewals start with the manager (Assemble).
func (n *Node) joinCluster(ctx context.Context, cfg config.Config, set config.Settings) error {
	inst, err := stateInstance(cfg.StateDir)
	if err != nil {
		return err
	}
	mcfg := manager.DefaultConfig()
	cpus, mem := manager.HostSize()
	if set.Node.Memory > 0 {
		mem = set.Node.Memory // what placement and admission count it as
	}
	mc := membership.Config{Name: set.Node.Name, Instance: inst, Address: set.Node.Advertise, Period: set.Node.LeasePeriod,
		Capacity: store.Resources{Memory: mem, CPUs: cpus, Sandboxes: mcfg.UIDSlots}, Labels: set.Node.Labels,
		// The runtimes and images are known once the node is whole; Start renews at once.
		Runtimes: func() []string {
			if n.Manager == nil {
				return nil
			}
			return n.Manager.Runtimes()
		},
		Images: func() []string {
			if n.Images == nil {
				return nil
			}
			d, _ := n.Images.Digests()
			return d
		}}
	reserved := func(ctx context.Context) (store.Resources, error) {
		if n.Manager == nil {
			return store.Resources{}, nil
		}
		return n.Manager.Reserved(ctx)
	}
	if n.Lease, err = membership.Acquire(ctx, n.Store, mc, reserved, n.log); err != nil {
		if cfg.Store.DSN != "" {
			return err
		}
		// On its own SQLite the node is alone: its lease only answers node ls. A lease
		// it cannot write (a full state disk) must not keep the daemon from starting,
		// since the daemon is what frees the disk; the next start records it.
		n.log.Warn("node membership not recorded; the node places sandboxes as a node alone", "node", mc.Name, "err", err)
		n.Lease = nil
		return nil
	}
	n.closers = append(n.closers, func() {
		if err := n.Lease.Close(); err != nil {
			n.log.Warn("membership lease not given back; the node reads as lost until it lapses", "err", err)
		}
	})
	n.log.Info("node joined", "node", mc.Name, "address", mc.Address, "epoch", n.Lease.Epoch())
	return nil
}

// openClusterTLS gives a node that serves the other nodes (node.listen) its identity
// among them: the cluster CA, which the first such node makes in the store, and a
// certificate of its own. A node whose join token is not the cluster's starts nothing.
func (n *Node) openClusterTLS(ctx context.Context, cfg config.Config, set config.Settings) error {
	if set.Node.Listen == "" {
		return nil
	}
	id, err := clustertls.Open(ctx, n.Store, string(cfg.Cluster.JoinToken), set.Node.Name, set.Node.Advertise, time.Now)
	if err != nil {
		return err
	}
	n.ClusterTLS = id
	sum := sha256.Sum256(id.CA().Raw)
	n.log.Info("cluster TLS ready", "node", id.Node(), "ca", hex.EncodeToString(sum[:8]))
	return nil
}

// stateInstance reads the state directory's instance identity, making it the first
// time.
func stateInstance(stateDir string) (string, error) {
	path := filepath.Join(stateDir, instanceFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the node's instance: %w", err)
	}
	id := make([]byte, 16)
	rand.Read(id)
	s := hex.EncodeToString(id)
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the node's instance: %w", err)
	}
	return s, nil
}

// placeBy is a cluster node's placement of new sandboxes: the manager ranks the nodes
// that can hold the sandbox (manager.Place), and the best one that has not already
// declined this create takes it.
func placeBy(m *manager.Manager) forward.Place {
	return func(ctx context.Context, req forward.PlaceRequest) (string, error) {
		ranked, err := m.Place(ctx, manager.PlaceRequest{Memory: req.Memory, CPUs: req.CPUs, Runtime: req.Runtime, Image: req.Image,
			NodeSelector: req.NodeSelector})
		if err != nil {
			return "", err
		}
		for _, node := range ranked {
			if !slices.Contains(req.Exclude, node) {
				return node, nil
			}
		}
		return "", errdefs.Quota("no other node can hold the sandbox: %s declined it", strings.Join(req.Exclude, ", "))
	}
}
