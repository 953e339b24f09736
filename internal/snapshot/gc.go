package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Chunks are reference-counted in memory: refs[hex] is the number of ready snapshots
// using a chunk, rebuilt from the manifests at Open. A chunk is removed when its count
// falls to zero, while gc is held exclusively, so no Create can be counting on it.

// Delete removes snapshot id and the chunks no other snapshot uses. It is refused while
// dependents (which may be nil) names anything that depends on the snapshot, or while it
// is being created. dependents must not call back into the store's Create, Verify,
// Restore or Delete. A chunk file that cannot be removed is left for the next Open.
//
// With an object store, the snapshot's manifest there goes first (a failure to remove
// it changes nothing), then the objects nothing uses any more (see remote.go); a failure
// there leaves them for the next Delete.
func (s *Store) Delete(id string, dependents func(id string) []string) error {
	if err := s.delete(id, dependents); err != nil {
		return err
	}
	if s.objs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
		defer cancel()
		_ = s.collectObjects(ctx) // best effort: garbage is collected by a later Delete
	}
	return nil
}

func (s *Store) delete(id string, dependents func(id string) []string) error {
	if !validID(id) {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	s.gc.Lock()
	defer s.gc.Unlock()
	s.mu.Lock()
	h, ok := s.heads[id]
	s.mu.Unlock()
	if !ok {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	if h.State == StateCreating {
		return errdefs.Precondition("snapshot %s is still being created", id)
	}
	if dependents != nil {
		if deps := dependents(id); len(deps) > 0 {
			return errdefs.Precondition("snapshot %s is still used by %s", id, strings.Join(deps, ", ")).
				WithDetails(map[string]any{"snapshot_id": id, "dependents": deps})
		}
	}
	if s.objs != nil && h.Location != "" {
		if err := s.deleteRemote(id); err != nil {
			return err
		}
	}
	var chunks []string
	if h.State == StateReady {
		m, err := s.readManifest(id)
		switch {
		case err == nil:
			chunks = chunkSet(m)
		case !errors.Is(err, errBadManifest):
			return err
		}
		// A manifest damaged since Open keeps its chunks counted until the next Open.
	}
	// The manifest goes first: a crash after it leaves only unused chunks, which Open sweeps.
	if err := os.Remove(s.manifestPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := durable.SyncDir(s.manifestDir()); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.heads, id)
	var unused []string
	for _, c := range chunks {
		if s.refs[c]--; s.refs[c] <= 0 {
			delete(s.refs, c)
			unused = append(unused, c)
		}
	}
	s.mu.Unlock()
	s.removeChunks(unused)
	return nil
}

// addRefs counts the chunks of a snapshot that just became ready.
func (s *Store) addRefs(m *Manifest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range chunkSet(m) {
		s.refs[c]++
	}
}

// collect removes those of chunks (written by a Create that failed) that no ready
// snapshot uses. It waits for every running Create, one of which may have reused them.
func (s *Store) collect(chunks []string) {
	s.gc.Lock()
	defer s.gc.Unlock()
	s.mu.Lock()
	var unused []string
	for _, c := range chunks {
		if s.refs[c] == 0 {
			unused = append(unused, c)
		}
	}
	s.mu.Unlock()
	s.removeChunks(unused)
}

func (s *Store) removeChunks(chunks []string) {
	for _, c := range chunks {
		os.Remove(s.chunkPath(c))
	}
}

// sweep removes temp files and chunks that no ready snapshot uses; Open runs it before
// anything else can use the store.
func (s *Store) sweep() error {
	prefixes, err := os.ReadDir(filepath.Join(s.dir, "chunks"))
	if err != nil {
		return err
	}
	for _, pd := range prefixes {
		dir := filepath.Join(s.dir, "chunks", pd.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range ents {
			if name := de.Name(); strings.HasPrefix(name, ".tmp-") || s.refs[name] == 0 {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
		}
	}
	return nil
}
