package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

func toAPIImage(img *manager.Image) api.Image {
	vis := api.VisibilityPrivate
	if img.Public || img.Builtin {
		vis = api.VisibilityPublic
	}
	return api.Image{Name: img.Name, Digest: img.Digest, Layers: len(img.Layers), Size: img.Size, Created: img.Created,
		Builtin: img.Builtin, Owner: img.Owner, Visibility: vis}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	list, err := s.m.ListImages(manager.Call{Owner: owner(r), Admin: isAdmin(r)})
	if err != nil {
		return err
	}
	out := api.ImageList{Images: []api.Image{}}
	for _, img := range list {
		out.Images = append(out.Images, toAPIImage(img))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// importImage stores the uploaded archive in a temporary file (the formats need random
// access), at most the store's upload limit of it, then imports it, streaming progress
// as NDJSON.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	name := q.Get("name")
	public := false
	switch v := q.Get("visibility"); v {
	case "", api.VisibilityPrivate:
	case api.VisibilityPublic:
		public = true
	default:
		return errdefs.Invalid("invalid visibility %q: use private or public", v)
	}
	c := manager.Call{Owner: owner(r), Admin: isAdmin(r)}
	if err := s.m.MayImport(c, public); err != nil {
		return err
	}
	limit := s.m.ImageUploadLimit()
	if r.ContentLength > limit {
		return uploadTooLarge(limit)
	}
	dir := filepath.Join(s.opts.StateDir, "uploads")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "import-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return uploadTooLarge(limit)

	case err != nil:
		return errdefs.Invalid("the upload did not complete: %v", err)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	emit := func(ev api.ImportEvent) {
		enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	var last int64 = -1
	img, err := s.m.ImportImage(r.Context(), c, f.Name(), name, public, func(phase string, done, total int64) {
		// About a hundred updates for a whole import is plenty for a progress bar.
		if total > 0 && done != total && last >= 0 && (done-last)*100 < total {
			return
		}
		last = done
		emit(api.ImportEvent{Phase: phase, Done: done, Total: total})
	})
	if err != nil {
		_, e := s.apiError(r, err)
		emit(api.ImportEvent{Error: &e})
		return nil
	}
	ai := toAPIImage(img)
	emit(api.ImportEvent{Image: &ai})
	return nil
}

func uploadTooLarge(limit int64) error {
	return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: errTooLarge,
		Msg:     fmt.Sprintf("the image archive is larger than %d bytes, the most this node accepts in one upload", limit),
		Details: map[string]any{"limit": limit}}
}

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.RemoveImage(r.Context(), manager.Call{Owner: owner(r), Admin: isAdmin(r)}, r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
