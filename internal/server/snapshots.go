package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
)

func toAPISnapshot(m *manager.Snapshot, withChunks bool) *api.Snapshot {
	out := &api.Snapshot{ID: m.ID, SandboxID: m.SandboxID, ImageDigest: m.ImageDigest, Parent: m.Parent,
		Consistency: m.Consistency, State: m.State, LogicalSize: m.LogicalSize, StoredSize: m.StoredSize,
		Files: len(m.Entries), Created: m.Created, Labels: m.Labels}
	if mi := m.Memory; mi != nil {
		out.Memory = &api.SnapshotMemory{Bytes: mi.Bytes}
		for _, f := range mi.Files {
			out.Memory.Files = append(out.Memory.Files, api.SnapshotMemoryFile(f))
		}
	}
	if withChunks {
		seen := map[string]bool{}
		out.Chunks = []string{}
		for _, e := range m.Entries {
			for _, c := range e.Chunks {
				if !seen[c.Digest] {
					seen[c.Digest] = true
					out.Chunks = append(out.Chunks, c.Digest)
				}
			}
		}
	}
	return out
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var req api.SnapshotRequest
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	op, man, err := s.m.Snapshot(r.Context(), c, r.PathValue("ref"), manager.SnapshotRequest{Labels: req.Labels, Memory: req.Memory})
	if err != nil {
		return s.opResult(w, r, 0, op, nil, err)
	}
	writeJSON(w, http.StatusCreated, api.OperationResponse{Operation: toAPIOperation(op), Snapshot: toAPISnapshot(man, false)})
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	list, err := s.m.Snapshots(r.Context(), owner(r), r.URL.Query().Get("sandbox"))
	if err != nil {
		return err
	}
	out := api.SnapshotList{Snapshots: []api.Snapshot{}}
	for _, m := range list {
		out.Snapshots = append(out.Snapshots, *toAPISnapshot(m, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	man, err := s.m.SnapshotOwned(r.Context(), owner(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISnapshot(man, true))
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.DeleteSnapshot(r.Context(), owner(r), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restoreSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.RestoreRequest
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	if from := principal(r).Sandbox; from != "" && req.Snapshot != "" {
		if err := s.reachSnapshot(r, from, req.Snapshot); err != nil {
			return err
		}
	}
	op, sb, safety, err := s.m.Restore(r.Context(), c, r.PathValue("ref"), manager.RestoreRequest{Snapshot: req.Snapshot, NoSafety: req.NoSafetySnapshot})
	if err != nil || safety == nil || sb == nil {
		return s.opResult(w, r, http.StatusOK, op, sb, err)
	}
	w.Header().Set("ETag", etag(sb.Version))
	writeJSON(w, http.StatusOK, api.OperationResponse{Operation: toAPIOperation(op), Sandbox: toAPISandbox(sb), Snapshot: toAPISnapshot(safety, false)})
	return nil
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.fork(w, r, r.PathValue("ref"))
}

func (s *Server) forkSnapshot(w http.ResponseWriter, r *http.Request) error {
	return s.fork(w, r, r.PathValue("id"))
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, src string) error {
	var req api.ForkRequest
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	if err := volumesFromInside(r, req.Volumes); err != nil {
		return err
	}
	op, sb, err := s.m.Fork(r.Context(), c, src, manager.ForkRequest{Name: req.Name, Labels: req.Labels, Volumes: fromAPIVolumeMounts(req.Volumes)})
	return s.opResult(w, r, http.StatusCreated, op, sb, err)
}
