package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/secret"
)

func toAPIImage(img *manager.Image) api.Image {
	vis := api.VisibilityPrivate
	if img.Public || img.Builtin {
		vis = api.VisibilityPublic
	}
	return api.Image{Name: img.Name, Digest: img.Digest, Layers: len(img.Layers), Size: img.Size, Created: img.Created,
		Builtin: img.Builtin, Owner: img.Owner, Visibility: vis, Reference: img.Reference, Shared: img.Shared}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	list, err := s.m.ListImages(manager.Call{Owner: owner(r), Admin: isAdmin(r)})
	if err != nil {
		return err
	}
	used, err := s.m.ImageSandboxes(r.Context(), owner(r), visible(r))
	if err != nil {
		return err
	}
	out := api.ImageList{Images: []api.Image{}}
	for _, img := range list {
		ai := toAPIImage(img)
		ai.Sandboxes = used[img.Digest]
		out.Images = append(out.Images, ai)
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
	emit := ndjson[api.ImportEvent](w)
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

// pullImage pulls an image from its registry, answering a stream of progress events
// (one per layer step) that ends with the image or an error.
func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) error {
	var req api.PullRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	public := false
	switch req.Visibility {
	case "", api.VisibilityPrivate:
	case api.VisibilityPublic:
		public = true
	default:
		return errdefs.Invalid("invalid visibility %q: use private or public", req.Visibility)
	}
	switch req.Policy {
	case "", api.PullAlways, api.PullMissing:
	default:
		return errdefs.Invalid("invalid pull policy %q: always or missing (never pulls nothing)", req.Policy)
	}
	c := manager.Call{Owner: owner(r), Admin: isAdmin(r)}
	if err := s.m.MayImport(c, public); err != nil {
		return err
	}
	emit := ndjson[api.PullEvent](w)
	img, err := s.m.PullImage(r.Context(), c, manager.PullRequest{Ref: req.Ref, Name: req.Name, Public: public,
		Missing: req.Policy == api.PullMissing, Username: req.Username, Password: req.Password}, pullEvents(emit))
	if err != nil {
		_, e := s.apiError(r, err)
		emit(api.PullEvent{Error: &e})
		return nil
	}
	ai := toAPIImage(img)
	emit(api.PullEvent{Status: "complete", Image: &ai})
	return nil
}

// pullEvents hands a pull's steps to emit as API events, about fifty a layer while it
// downloads (plenty for a progress bar). A pull reports from one goroutine at a time.
func pullEvents(emit func(api.PullEvent)) func(manager.PullEvent) {
	last := map[int]int64{}
	return func(ev manager.PullEvent) {
		if ev.Status == "downloading" && ev.Total > 0 && ev.Done != ev.Total && (ev.Done-last[ev.Layer])*50 < ev.Total {
			return
		}
		last[ev.Layer] = ev.Done
		emit(api.PullEvent{Status: ev.Status, Ref: ev.Ref, Digest: ev.Digest, Layer: ev.Layer, Layers: ev.Layers, Done: ev.Done, Total: ev.Total})
	}
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) error {
	img, err := s.m.InspectImage(manager.Call{Owner: owner(r), Admin: isAdmin(r)}, r.PathValue("ref"))
	if err != nil {
		return err
	}
	used, err := s.m.ImageSandboxes(r.Context(), owner(r), visible(r))
	if err != nil {
		return err
	}
	ai := toAPIImage(img)
	ai.Sandboxes = used[img.Digest]
	c := img.Config
	ai.Config = &api.ImageConfig{Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, User: c.User}
	ai.LayerIDs = img.Layers
	writeJSON(w, http.StatusOK, ai)
	return nil
}

func (s *Server) pruneImages(w http.ResponseWriter, r *http.Request) error {
	removed, freed, err := s.m.PruneImages(r.Context(), manager.Call{Owner: owner(r), Admin: isAdmin(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PruneResult{Removed: removed, Freed: freed})
	return nil
}

func (s *Server) registryLogin(w http.ResponseWriter, r *http.Request) error {
	var req api.RegistryLoginRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	host, err := s.m.RegistryLogin(r.Context(), owner(r), req.Registry, req.Username, []byte(req.Password))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.RegistryLogin{Registry: host, Secret: secret.RegistryName(host)})
	return nil
}

func (s *Server) registryLogout(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.RegistryLogout(r.Context(), owner(r), r.PathValue("registry")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ndjson starts a 200 answer of NDJSON events and returns what writes and flushes one.
func ndjson[E any](w http.ResponseWriter) func(E) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	return func(ev E) {
		enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func uploadTooLarge(limit int64) error {
	return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: jsonbody.ErrTooLarge,
		Msg:     fmt.Sprintf("the image archive is larger than %d bytes, the most this node accepts in one upload", limit),
		Details: map[string]any{"limit": limit}}
}

// exportImage streams the image as a tar archive. An error before the first byte is an
// ordinary error answer; one after it (a stored blob that changed on disk) is the
// Airlock-Error trailer, which the client checks at the end of the body.
func (s *Server) exportImage(w http.ResponseWriter, r *http.Request) error {
	lw := &lazyStream{w: w, contentType: "application/x-tar", trailer: exportErrorTrailer}
	err := s.m.ExportImage(manager.Call{Owner: owner(r), Admin: isAdmin(r)}, r.PathValue("ref"), lw)
	if err != nil && lw.started {
		w.Header().Set(exportErrorTrailer, oneLine(err.Error()))
		return nil
	}
	if err == nil && !lw.started {
		lw.start()
	}
	return err
}

// exportErrorTrailer carries the error of an export that failed after it began.
const exportErrorTrailer = "Airlock-Error"

// lazyStream sends the status and headers of a successful answer with the first byte
// of its body, so an error found before then is still an ordinary error answer.
type lazyStream struct {
	w           http.ResponseWriter
	contentType string
	trailer     string
	started     bool
}

func (l *lazyStream) start() {
	l.started = true
	h := l.w.Header()
	h.Set("Content-Type", l.contentType)
	h.Set("Trailer", l.trailer)
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyStream) Write(b []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(b)
}

// oneLine keeps a header value to one line.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.RemoveImage(r.Context(), manager.Call{Owner: owner(r), Admin: isAdmin(r)}, r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
