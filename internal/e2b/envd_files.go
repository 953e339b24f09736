package e2b

// The /files routes of the in-sandbox plane: envd's plain HTTP download and upload,
// over the sandbox's agent.

import (
	"compress/gzip"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/manager"
)

// maxUploadParts bounds the parts of a multipart upload.
const maxUploadParts = 1000

// download answers GET /files?path=: the file's bytes. What can go wrong is checked
// before the first byte, while the status can still say so.
func (c *Control) download(w http.ResponseWriter, r *http.Request, t *target) error {
	ctx := r.Context()
	p, err := t.resolvePath(ctx, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	fi, err := t.wk.Stat(ctx, p)
	if err != nil {
		return agentErr(err)
	}
	if fi.IsDir {
		return errdefs.Invalid("%s is a directory; download its files one by one", p)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	disposition := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)})
	if disposition == "" {
		disposition = "attachment"
	}
	h.Set("Content-Disposition", disposition)
	h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	out := &httpedge.Tracker{W: w}
	n, err := t.wk.Download(ctx, p, out)
	switch {
	case err == nil:
	case !out.Sent:
		h.Del("Content-Disposition")
		h.Del("Content-Length")
		return agentErr(err)
	case ctx.Err() == nil: // not the client going away
		// The status is gone; the length the client was promised tells it the file is
		// short.
		c.log.Warn("download cut short", "sandbox", t.id, "path", p, "sent", n, "err", err)
	}
	return nil
}

// uploaded is one file an upload wrote, as envd describes it: its name, type and path,
// and, as newer envd versions add, what a filesystem entry says of it.
type uploaded struct {
	Name          string     `json:"name"`
	Type          string     `json:"type"`
	Path          string     `json:"path"`
	Size          *int64     `json:"size,omitempty"`
	Mode          *uint32    `json:"mode,omitempty"`
	Permissions   string     `json:"permissions,omitempty"`
	Owner         string     `json:"owner,omitempty"`
	Group         string     `json:"group,omitempty"`
	ModifiedTime  *time.Time `json:"modifiedTime,omitempty"`
	SymlinkTarget *string    `json:"symlinkTarget,omitempty"`
}

// uploadedEntry describes the file an upload wrote at p as a filesystem entry does
// (entryInfo); without fi (the file could not be described), by its name alone.
func uploadedEntry(p string, fi *agentproto.FileInfo) uploaded {
	u := uploaded{Name: path.Base(p), Type: "file", Path: p}
	if fi == nil {
		return u
	}
	e := entryInfo(p, fi)
	mt := e.GetModifiedTime().AsTime().UTC()
	u.Size, u.Mode, u.Permissions, u.Owner, u.Group = &e.Size, &e.Mode, e.GetPermissions(), e.GetOwner(), e.GetGroup()
	u.ModifiedTime, u.SymlinkTarget = &mt, e.SymlinkTarget
	return u
}

// upload answers POST /files?path=: the body is one file (application/octet-stream), or
// multipart/form-data whose "file" parts are files, each written to path or, without
// it, to the part's file name. Either may be gzip-compressed (Content-Encoding). Files
// are the request user's, mode 0644, written under their own names; missing parent
// directories are made.
func (c *Control) upload(w http.ResponseWriter, r *http.Request, t *target) error {
	ctx := r.Context()
	q := r.URL.Query()
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mediaType != "application/octet-stream" && mediaType != "multipart/form-data") {
		return errdefs.Invalid("Content-Type %.64q is neither application/octet-stream (one file) nor multipart/form-data", r.Header.Get("Content-Type"))
	}
	raw := io.Reader(r.Body)
	if mediaType == "application/octet-stream" {
		// One file: no real gzip stream of a file within the bound is much larger.
		raw = &manager.LimitReader{R: r.Body, N: c.m.MaxFileUpload() + 1<<20}
	}
	body, err := decodedBody(r.Header.Get("Content-Encoding"), raw)
	if err != nil {
		return err
	}
	u, err := t.lookupUser(ctx)
	if err != nil {
		return err
	}
	out := []uploaded{}
	write := func(name string, rd io.Reader) error {
		dst, err := resolveIn(name, u.Home)
		if err != nil {
			return err
		}
		for _, f := range out {
			if f.Path == dst {
				return errdefs.Invalid("more than one file of the upload goes to %s; the first was written", dst)
			}
		}
		// In place, as envd writes: a watcher sees the file's own name, never another.
		if _, err := t.wk.UploadInPlace(ctx, dst, 0o644, int(u.UID), int(u.GID), rd); err != nil {
			return err
		}
		fi, err := t.wk.Stat(ctx, dst)
		if err != nil {
			fi = nil // written; only its description is missing
		}
		out = append(out, uploadedEntry(dst, fi))
		return nil
	}

	if mediaType == "application/octet-stream" {
		if !q.Has("path") {
			return errdefs.Invalid("the path query parameter is required with a body of one file (application/octet-stream)")
		}
		if err := write(q.Get("path"), body); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	if params["boundary"] == "" {
		return errdefs.Invalid("the multipart/form-data Content-Type names no boundary")
	}
	mr := multipart.NewReader(body, params["boundary"])
	for parts := 0; ; parts++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errdefs.Invalid("reading the multipart body: %v", err)
		}
		if parts == maxUploadParts {
			return errdefs.Invalid("the upload has more than %d parts, the most one takes", maxUploadParts)
		}
		if part.FormName() != "file" {
			continue
		}
		name := q.Get("path")
		if !q.Has("path") {
			// The raw file name: the SDKs send the destination path there, which
			// part.FileName would cut to its last element.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if name = dp["filename"]; name == "" {
				return errdefs.Invalid("part %d names no file (its filename) and the request no path", parts+1)
			}
		}
		if err := write(name, part); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// decodedBody is body decompressed as the Content-Encoding enc says.
func decodedBody(enc string, body io.Reader) (io.Reader, error) {
	switch enc {
	case "", "identity":
		return body, nil
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, errdefs.Invalid("the body is not gzip, as its Content-Encoding says: %v", err)
		}
		return zr, nil
	default:
		return nil, errdefs.Invalid("Content-Encoding %.64q is not one this plane decodes: gzip or none", enc)
	}
}
