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

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mode := uint64(0o644)
	if ms := r.URL.Query().Get("mode"); ms != "" {
		if mode, err = strconv.ParseUint(ms, 8, 32); err != nil || mode > 0o7777 {
			s.writeError(w, r, errdefs.Invalid("invalid mode %q: use octal permission bits such as 0644 or 0755", ms))
			return
		}
	}
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := cl.Upload(r.Context(), p, uint32(mode), 0, 0, r.Body); err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	writeJSON(w, http.StatusCreated, toAPIFile(path.Dir(p), *fi))
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Stat first so that a missing file or a directory is a clean error, not a cut body.
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	if fi.IsDir {
		s.writeError(w, r, errdefs.Invalid("%s is a directory; only files can be downloaded", p))
		return
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
			s.writeError(w, r, s.m.AgentFailed(sb, err))
			return
		}
		s.log.Warn("download cut short", "path", p, "err", err)
	}
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

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := cl.Remove(r.Context(), p, recursive); err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := cl.List(r.Context(), p)
	if err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	out := api.FileList{Files: []api.FileInfo{}}
	for _, fi := range list {
		out.Files = append(out.Files, toAPIFile(p, fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	fi, err := cl.Stat(r.Context(), p)
	if err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	writeJSON(w, http.StatusOK, toAPIFile(path.Dir(p), *fi))
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	cl, sb, err := s.m.Agent(r.Context(), owner(r), r.PathValue("ref"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := cl.Mkdir(r.Context(), req.Path, req.Parents); err != nil {
		s.writeError(w, r, s.m.AgentFailed(sb, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
