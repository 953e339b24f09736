package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/manager"
)

// uploadTree unpacks the request's tar stream into the directory ?path= of the
// sandbox (the agent does, under the sandbox's root).
func (s *Server) uploadTree(w http.ResponseWriter, r *http.Request) error {
	p, wk, err := s.treeWork(r)
	if err != nil {
		return err
	}
	res, err := wk.UploadTree(r.Context(), p, r.Body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.TreeSummary{Path: p, Files: res.Files, Dirs: res.Dirs, Links: res.Links, Bytes: res.Bytes})
	return nil
}

// downloadTree streams the tree under the directory ?path= as a tar stream. A failure
// before the first byte is an error answer; after it, the connection is cut before the
// answer's end (a tar stream cut between two entries would otherwise read as whole).
func (s *Server) downloadTree(w http.ResponseWriter, r *http.Request) error {
	p, wk, err := s.treeWork(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-tar")
	tw := &httpedge.Tracker{W: w}
	if _, err := wk.DownloadTree(r.Context(), p, tw); err != nil {
		if !tw.Sent {
			w.Header().Del("Content-Type")
			return err
		}
		s.log.Warn("tree download cut short", "path", p, "err", err)
		return httpedge.Cut(err)
	}
	return nil
}

// treeWork is the ?path= of a tree call and the sandbox it reaches.
func (s *Server) treeWork(r *http.Request) (string, *manager.Work, error) {
	p, err := filePath(r)
	if err != nil {
		return "", nil, err
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	return p, wk, err
}
