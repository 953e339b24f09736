package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/manager"
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
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if _, err := wk.Upload(r.Context(), p, uint32(mode), 0, 0, r.Body); err != nil {
		return err
	}
	fi, err := wk.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toAPIFile(path.Dir(p), *fi))
	return nil
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	// Stat first so that a missing file or a directory is a clean error, not a cut body.
	fi, err := wk.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if fi.IsDir {
		return errdefs.Invalid("%s is a directory; only files can be downloaded", p)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	tw := &httpedge.Tracker{W: w}
	if rng := r.Header.Get("Range"); rng != "" && !fi.IsSymlink {
		// A link's size is not its target's, so a range of one is not offered.
		return s.downloadRange(w, r, tw, wk, p, rng, fi.Size)
	}
	if !fi.IsSymlink {
		// A link's size is not its target's; without a length the body simply ends.
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	if _, err := wk.Download(r.Context(), p, tw); err != nil {
		if !tw.Sent {
			w.Header().Del("Content-Length")
			w.Header().Del("Content-Type")
			return err
		}
		s.log.Warn("download cut short", "path", p, "err", err)
		return httpedge.Cut(err)
	}
	return nil
}

// downloadRange answers a Range request for the file at p of size bytes: 206 with the
// part, or 416 when the range starts past the end. One range only ("bytes=A-B",
// "bytes=A-", "bytes=-N"); anything else is refused, not ignored, so a client never
// mistakes a whole file for the part it asked for.
func (s *Server) downloadRange(w http.ResponseWriter, r *http.Request, tw *httpedge.Tracker, cl fileReader, p, rng string, size int64) error {
	start, end, err := parseRange(rng, size)
	if err != nil {
		return err
	}
	if start >= size {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Cause: errRangeUnsatisfiable, Msg: fmt.Sprintf("range %s starts past the end of %s (%d bytes)", rng, p, size),
			Details: map[string]any{"size": size}}
	}
	length := end - start + 1
	part := &partWriter{w: w, tw: tw, contentRange: fmt.Sprintf("bytes %d-%d/%d", start, end, size), length: length}
	_, err = cl.DownloadRange(r.Context(), p, start, length, part)
	if errors.Is(err, manager.ErrNoRangedRead) {
		// An agent older than ranged reads sends the whole file: the part is cut from
		// it here, so the answer is the same 206 and the client never holds more.
		_, err = cl.Download(r.Context(), p, &sectionWriter{w: part, skip: start, left: length})
		if errors.Is(err, errSectionDone) {
			err = nil // the rest of the file is not read
		}
	}
	if err == nil && !part.started {
		err = errdefs.Unavailable("the sandbox sent none of bytes %d-%d of %s (the file changed?)", start, end, p)
	}
	if err != nil {
		if !tw.Sent && !part.started {
			return err
		}
		s.log.Warn("download cut short", "path", p, "err", err)
		return httpedge.Cut(err)
	}
	return nil
}

// partWriter writes a 206 answer's status and headers before its first byte, so that
// an agent that cannot send a part leaves the answer unstarted.
type partWriter struct {
	w            http.ResponseWriter
	tw           *httpedge.Tracker
	contentRange string
	length       int64
	started      bool
}

func (p *partWriter) start() {
	p.started = true
	p.w.Header().Set("Content-Range", p.contentRange)
	p.w.Header().Set("Content-Length", strconv.FormatInt(p.length, 10))
	p.w.WriteHeader(http.StatusPartialContent)
}

func (p *partWriter) Write(b []byte) (int, error) {
	if !p.started {
		p.start()
	}
	return p.tw.Write(b)
}

// sectionWriter passes on the left bytes that follow the first skip bytes written to it,
// then stops the copy with errSectionDone: what an agent sends past the part (it could
// send without end) is not read. (client's rangeWriter does the same on the other side
// of the API; the client package may not share the daemon's code.)
type sectionWriter struct {
	w          io.Writer
	skip, left int64
}

var errSectionDone = errors.New("section written")

func (s *sectionWriter) Write(b []byte) (int, error) {
	n := len(b)
	drop := min(s.skip, int64(len(b)))
	s.skip -= drop
	b = b[drop:]
	if keep := min(s.left, int64(len(b))); keep > 0 {
		if _, err := s.w.Write(b[:keep]); err != nil {
			return 0, err
		}
		s.left -= keep
	}
	if s.left == 0 {
		return n, errSectionDone
	}
	return n, nil
}

// fileReader is the part of Work that reads files.
type fileReader interface {
	Download(ctx context.Context, path string, w io.Writer) (int64, error)
	DownloadRange(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error)
}

// parseRange reads one byte range of a file of size bytes: its first and last byte.
func parseRange(rng string, size int64) (start, end int64, err error) {
	bad := errdefs.Invalid("invalid Range %q: one range, bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX", rng)
	spec, ok := strings.CutPrefix(rng, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, bad
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, bad
	}
	num := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && n >= 0 && s != "" && s[0] != '+'
	}
	switch {
	case a == "": // the last N bytes
		n, ok := num(b)
		if !ok || n == 0 {
			return 0, 0, bad
		}
		return max(size-n, 0), size - 1, nil
	case b == "":
		if start, ok = num(a); !ok {
			return 0, 0, bad
		}
		return start, size - 1, nil
	}
	start, ok1 := num(a)
	end, ok2 := num(b)
	if !ok1 || !ok2 || end < start {
		return 0, 0, bad
	}
	return start, min(end, size-1), nil
}

// errRangeUnsatisfiable is a range that starts past the end of its file (416).
var errRangeUnsatisfiable = errors.New("range not satisfiable")

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if err := wk.Remove(r.Context(), p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	list, err := wk.List(r.Context(), p)
	if err != nil {
		return err
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
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	fi, err := wk.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIFile(path.Dir(p), *fi))
	return nil
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req api.MkdirRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	wk, err := s.m.Work(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	if err := wk.Mkdir(r.Context(), req.Path, req.Parents, -1, -1); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
