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
	"github.com/airlockhq/airlock/internal/image"
)

func toAPIImage(img *image.Image) api.Image {
	vis := api.VisibilityPrivate
	if img.Public || img.Builtin {
		vis = api.VisibilityPublic
	}
	return api.Image{Name: img.Name, Digest: img.Digest, Layers: len(img.Layers), Size: img.Size, Created: img.Created,
		Builtin: img.Builtin, Owner: img.Owner, Visibility: vis}
}

// imageScope is whom an image request acts for: its owner, an administrator when it
// came through the unix socket.
func imageScope(r *http.Request) image.Scope {
	return image.Scope{Owner: owner(r), Admin: owner(r) == LocalOwner}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.Images().List(imageScope(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.ImageList{Images: []api.Image{}}
	for _, img := range list {
		out.Images = append(out.Images, toAPIImage(img))
	}
	writeJSON(w, http.StatusOK, out)
}

// importImage stores the uploaded archive in a temporary file (the formats need random
// access), at most the store's upload limit of it, then imports it, streaming progress
// as NDJSON.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("name")
	public := false
	switch v := q.Get("visibility"); v {
	case "", api.VisibilityPrivate:
	case api.VisibilityPublic:
		public = true
	default:
		s.writeError(w, r, errdefs.Invalid("invalid visibility %q: use private or public", v))
		return
	}
	sc := imageScope(r)
	if public && !sc.Admin {
		s.writeError(w, r, &errdefs.Error{Class: errdefs.ErrPermissionDenied,
			Msg: "only an administrator (over the unix socket) can publish a public image"})
		return
	}
	limit := s.m.Images().Limits().Upload
	if r.ContentLength > limit {
		s.writeError(w, r, uploadTooLarge(limit))
		return
	}
	dir := filepath.Join(s.opts.StateDir, "uploads")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := os.CreateTemp(dir, "import-*")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		s.writeError(w, r, uploadTooLarge(limit))
		return
	case err != nil:
		s.writeError(w, r, errdefs.Invalid("the upload did not complete: %v", err))
		return
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
	req := image.ImportRequest{Archive: f.Name(), Name: name, Public: public, Users: s.m.ImageUsers(r.Context(), sc.Owner)}
	img, err := s.m.Images().Import(r.Context(), sc, req, func(phase string, done, total int64) {
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
		return
	}
	ai := toAPIImage(img)
	emit(api.ImportEvent{Image: &ai})
}

func uploadTooLarge(limit int64) error {
	return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: errTooLarge,
		Msg:     fmt.Sprintf("the image archive is larger than %d bytes, the most this node accepts in one upload", limit),
		Details: map[string]any{"limit": limit}}
}

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	sc := imageScope(r)
	if err := s.m.Images().Remove(sc, r.PathValue("ref"), s.m.ImageUsers(r.Context(), sc.Owner)); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
