package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/store"
)

func toAPIImage(img *image.Image) api.Image {
	return api.Image{Name: img.Name, Digest: img.Digest, Layers: len(img.Layers), Size: img.Size, Created: img.Created, Builtin: img.Builtin}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.Images().List()
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
// access), then imports it, streaming progress as NDJSON.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
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
	_, err = io.Copy(f, r.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
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
	img, err := s.m.Images().Import(r.Context(), f.Name(), name, func(phase string, done, total int64) {
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

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	err := s.m.Images().Remove(r.PathValue("ref"), func(digest string) bool {
		return s.imageInUse(ctx, digest)
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) imageInUse(ctx context.Context, digest string) bool {
	list, err := s.m.List(ctx, store.SandboxFilter{})
	if err != nil {
		return true // when in doubt, keep it
	}
	for _, sb := range list {
		if sb.ImageDigest == digest && sb.State != "terminated" {
			return true
		}
	}
	return false
}
