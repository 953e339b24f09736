package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

func toAPIVolume(v *manager.Volume) *api.Volume {
	out := &api.Volume{ID: v.ID, Kind: v.Kind, Name: v.Name, Owner: v.Owner, Node: v.Node, Size: v.Size, Source: v.Source,
		Checksum: v.Checksum, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Attachments: []api.VolumeAttachment{}}
	if v.GrowTo > v.Size {
		out.GrowTo = v.GrowTo
	}
	for _, a := range v.Attachments {
		out.Attachments = append(out.Attachments, api.VolumeAttachment{Sandbox: a.SandboxID, Path: a.Path, ReadOnly: a.ReadOnly})
	}
	return out
}

// fromAPIVolumeMounts turns a create's or a fork's volumes into the manager's.
func fromAPIVolumeMounts(in []api.VolumeMount) []manager.VolumeMountRequest {
	var out []manager.VolumeMountRequest
	for _, v := range in {
		out = append(out, manager.VolumeMountRequest{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	return out
}

// volumesFromInside refuses volumes named by code inside a sandbox, in a create or a
// fork: volumes are managed from outside sandboxes, and the sandbox it makes (which it
// then reaches) would read and write any of its owner's volumes for it.
func volumesFromInside(r *http.Request, vols []api.VolumeMount) error {
	p := principal(r)
	if p == nil || p.Sandbox == "" || len(vols) == 0 {
		return nil
	}
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "from inside sandbox " + p.Sandbox +
		", a sandbox is created or forked without volumes: volumes are attached from outside sandboxes"}
}

func toAPIVolumeMounts(sb *manager.Sandbox) []api.VolumeMount {
	var out []api.VolumeMount
	for _, v := range sb.Volumes {
		out = append(out, api.VolumeMount{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	return out
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateVolumeRequest
	if _, err := s.decodeCall(w, r, &req); err != nil {
		return err
	}
	v, err := s.m.CreateVolume(r.Context(), owner(r), req.Name, req.Size, req.From)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toAPIVolume(v))
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	kind := r.URL.Query().Get("kind")
	switch kind {
	case "":
		kind = manager.VolumeKindVolume
	case manager.VolumeKindVolume, manager.VolumeKindSnapshot:
	default:
		return errdefs.Invalid("kind %q must be volume or snapshot", kind)
	}
	list, err := s.m.ListVolumes(r.Context(), owner(r), kind)
	if err != nil {
		return err
	}
	out := api.VolumeList{Volumes: []api.Volume{}}
	for _, v := range list {
		out.Volumes = append(out.Volumes, *toAPIVolume(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	v, err := s.m.GetVolume(r.Context(), owner(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIVolume(v))
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.DeleteVolume(r.Context(), owner(r), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) resizeVolume(w http.ResponseWriter, r *http.Request) error {
	var req api.ResizeVolumeRequest
	if _, err := s.decodeCall(w, r, &req); err != nil {
		return err
	}
	v, err := s.m.ResizeVolume(r.Context(), owner(r), r.PathValue("name"), req.Size)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIVolume(v))
	return nil
}

func (s *Server) snapshotVolume(w http.ResponseWriter, r *http.Request) error {
	v, err := s.m.SnapshotVolume(r.Context(), owner(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toAPIVolume(v))
	return nil
}

func (s *Server) attachVolume(w http.ResponseWriter, r *http.Request) error {
	var req api.AttachVolumeRequest
	if _, err := s.decodeCall(w, r, &req); err != nil {
		return err
	}
	sb, err := s.m.AttachVolume(r.Context(), owner(r), r.PathValue("name"), req.Sandbox,
		manager.VolumeMountRequest{Path: req.Path, ReadOnly: req.ReadOnly})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sb.Version))
	writeJSON(w, http.StatusOK, toAPISandbox(sb))
	return nil
}

func (s *Server) detachVolume(w http.ResponseWriter, r *http.Request) error {
	var req api.AttachVolumeRequest
	if _, err := s.decodeCall(w, r, &req); err != nil {
		return err
	}
	sb, err := s.m.DetachVolume(r.Context(), owner(r), r.PathValue("name"), req.Sandbox)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sb.Version))
	writeJSON(w, http.StatusOK, toAPISandbox(sb))
	return nil
}
