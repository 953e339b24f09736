package testca

import (
	"context"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/clustertls"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Node returns cluster node name's identity (clustertls, the product's own: its
// certificate, its listener's and dialler's checks) in a cluster of this CA's own: each
// CA keeps one cluster CA record in memory, so nodes of one CA trust each other and a
// node of another CA is a stranger.
func (ca *CA) Node(t testing.TB, name string) *clustertls.Identity {
	t.Helper()
	id, err := clustertls.Open(context.Background(), &ca.cluster, "test-join-token", name, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// memoryClusterCA is a store.ClusterCA that keeps its record in memory.
type memoryClusterCA struct {
	mu  sync.Mutex
	rec *store.ClusterCARecord
}

func (m *memoryClusterCA) PutClusterCAIfAbsent(_ context.Context, r *store.ClusterCARecord) (*store.ClusterCARecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rec == nil {
		m.rec = r
	}
	return m.rec, nil
}

func (m *memoryClusterCA) GetClusterCA(context.Context) (*store.ClusterCARecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rec == nil {
		return nil, errdefs.NotFound("no cluster CA")
	}
	return m.rec, nil
}
