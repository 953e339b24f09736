package server

import (
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

func toAPIFile(dir string, fi agentproto.FileInfo) api.FileInfo {
	return api.FileInfo{Name: fi.Name, Path: path.Join(dir, fi.Name), Size: fi.Size, Mode: fi.Mode, IsDir: fi.IsDir,
		MTime: time.Unix(fi.MTime, 0).UTC()}
}

func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", errdefs.Invalid("the path query parameter is required (an absolute path inside the sandbox)")
	}
	return p, nil
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	mode := uint64(0o644)
	if ms := r.URL.Query().Get("mode"); ms != "" {
		if mode, err = strconv.ParseUint(ms, 8, 32); err != nil || mode > 0o7777 {
			return errdefs.Invalid("invalid mode %q: use octal permission bits such as 0644 or 0755", ms)
		}
	}
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if _, err := cl.Upload(r.Context(), p, uint32(mode), 0, 0, r.Body); err != nil {
		return s.m.AgentFailed(sb, err)
	}
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		return s.m.AgentFailed(sb, err)
	}
	writeJSON(w, http.StatusCreated, toAPIFile(path.Dir(p), *fi))
	return nil
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	// Stat first so that a missing file or a directory is a clean error, not a cut body.
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		return s.m.AgentFailed(sb, err)
	}
	if fi.IsDir {
		return errdefs.Invalid("%s is a directory; only files can be downloaded", p)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if !fi.IsSymlink {
		// A link's size is not its target's; without a length the body simply ends.
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	tw := &trackingWriter{w: w}
	if _, err := cl.Download(r.Context(), p, tw); err != nil {
		if !tw.wrote {
			w.Header().Del("Content-Length")
			w.Header().Del("Content-Type")
			return s.m.AgentFailed(sb, err)
		}
		s.log.Warn("download cut short", "path", p, "err", err)
	}
	return nil
}

// trackingWriter notes whether any byte reached the client.
type trackingWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote = true
	return t.w.Write(p)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if err := cl.Remove(r.Context(), p, recursive); err != nil {
		return s.m.AgentFailed(sb, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	list, err := cl.List(r.Context(), p)
	if err != nil {
		return s.m.AgentFailed(sb, err)
	}
	out := api.FileList{Files: []api.FileInfo{}}
	for _, fi := range list {
		out.Files = append(out.Files, toAPIFile(p, fi))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		return s.m.AgentFailed(sb, err)
	}
	writeJSON(w, http.StatusOK, toAPIFile(path.Dir(p), *fi))
	return nil
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req api.MkdirRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cl, sb, err := s.m.Agent(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if err := cl.Mkdir(r.Context(), req.Path, req.Parents); err != nil {
		return s.m.AgentFailed(sb, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
