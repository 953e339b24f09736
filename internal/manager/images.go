package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/store"
)

// imageScope is whom an image call acts for: the caller, and whether it is an
// administrator.
func imageScope(call Call) image.Scope {
	return image.Scope{Owner: call.Owner, Admin: call.Admin}
}

// ListImages lists the images the caller can use: its own and the public ones.
func (m *Manager) ListImages(call Call) ([]*Image, error) {
	return m.images.List(imageScope(call))
}

// ImageUploadLimit is the most one image archive may be.
func (m *Manager) ImageUploadLimit() int64 { return m.images.Limits().Upload }

// MayImport says whether the caller may import an image (public: one every owner sees,
// which only an administrator may publish), before an upload is read.
func (m *Manager) MayImport(call Call, public bool) error {
	if public && !imageScope(call).Admin {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied,
			Msg: "only an administrator can publish a public image"}
	}
	return nil
}

// ImportImage imports the archive at path as the caller's image name (public: every
// owner's), reporting progress.
func (m *Manager) ImportImage(ctx context.Context, call Call, archive, name string, public bool, progress image.Progress) (*Image, error) {
	if err := m.MayImport(call, public); err != nil {
		return nil, err
	}
	req := image.ImportRequest{Archive: archive, Name: name, Public: public, Users: m.ImageUsers(ctx, call.Owner)}
	return m.images.Import(ctx, imageScope(call), req, progress)
}

// RemoveImage removes the caller's image ref, unless a sandbox not terminated uses it.
func (m *Manager) RemoveImage(ctx context.Context, call Call, ref string) error {
	return m.images.Remove(imageScope(call), ref, m.ImageUsers(ctx, call.Owner))
}

// PullRequest says what image to pull from which registry reference.
type PullRequest struct {
	Ref, Name string
	Public    bool
	// Missing pulls only when the caller sees no image of the name yet.
	Missing            bool
	Username, Password string
}

// PullEvent is one step of a pull, for progress.
type PullEvent = image.PullEvent

// Pull policies: when a create fetches its image from the registry.
const (
	PullMissing = "missing" // only when the caller sees no image of the name (the default)
	PullAlways  = "always"  // every time, so a moved tag is followed
	PullNever   = "never"   // never: the image must be here
)

// checkPull refuses a pull policy that is none of the above; "" is PullMissing.
func checkPull(p string) error {
	switch p {
	case "", PullMissing, PullAlways, PullNever:
		return nil
	}
	return errdefs.Invalid("invalid pull %q: use missing (the default: pull only when no image of the name is here), always or never", p)
}

// PullImage pulls req.Ref from its registry as the caller's image (public: every
// owner's), reporting each layer's progress to fn.
func (m *Manager) PullImage(ctx context.Context, call Call, req PullRequest, fn func(PullEvent)) (*Image, error) {
	if err := m.MayImport(call, req.Public); err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = req.Ref
	}
	if req.Missing {
		// Pulls of one name for one caller wait for each other, so that the first
		// fetches the image and the others find it here.
		unlock := m.pulls.lock(call.Owner + "\x00" + name)
		defer unlock()
		if img, err := m.images.Get(imageScope(call), name); err == nil {
			if fn != nil {
				fn(PullEvent{Ref: req.Ref, Status: "present"})
			}
			return img, nil
		}
	}
	// Mirrors first, each with the caller's login to it; the registry itself last.
	var tries []string
	for _, mirror := range m.cfg.RegistryMirrors[image.RegistryOf(req.Ref)] {
		if ref, err := image.OnRegistry(req.Ref, mirror); err == nil {
			tries = append(tries, ref)
		}
	}
	tries = append(tries, req.Ref)
	var errs []error
	for i, ref := range tries {
		try := req
		try.Ref, try.Name = ref, name
		if i < len(tries)-1 {
			// Credentials given for the registry are never sent to a mirror; a mirror
			// gets the caller's stored login to it, if any.
			try.Username, try.Password = "", ""
		}
		if err := m.pullCredentials(ctx, call.Owner, &try); err != nil {
			return nil, err
		}
		img, err := m.images.Pull(ctx, imageScope(call), image.PullRequest{Ref: try.Ref, Name: try.Name, Public: try.Public,
			Users: m.ImageUsers(ctx, call.Owner), Username: try.Username, Password: try.Password,
			Insecure: slices.Contains(m.cfg.InsecureRegistries, image.RegistryOf(try.Ref))}, fn)
		if err == nil {
			m.evictImages(ctx)
		}
		if err == nil || i == len(tries)-1 || ctx.Err() != nil ||
			!errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnavailable) {
			if len(errs) > 0 && err != nil {
				err = fmt.Errorf("%w (mirrors: %w)", err, errors.Join(errs...))
			}
			return img, err
		}
		m.log.Info("registry mirror failed; trying the next", "ref", ref, "err", err)
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...) // not reached: the last try returns
}

// ImageSandboxes maps image digests to the names of owner's sandboxes (not terminated)
// on them that keep keeps (every one, when keep is nil).
func (m *Manager) ImageSandboxes(ctx context.Context, owner string, keep func(*Sandbox) bool) (map[string][]string, error) {
	list, err := m.List(ctx, store.SandboxFilter{Owner: owner})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, sb := range list {
		if sb.State != Terminated && (keep == nil || keep(sb)) {
			out[sb.ImageDigest] = append(out[sb.ImageDigest], sb.Name)
		}
	}
	return out, nil
}

// ExportImage writes one of the images the caller can use to w as an archive that
// imports again with the same digest (see image.Store.Export).
func (m *Manager) ExportImage(call Call, ref string, w io.Writer) error {
	return m.images.Export(imageScope(call), ref, w)
}

// InspectImage returns one of the images the caller can use.
func (m *Manager) InspectImage(call Call, ref string) (*Image, error) {
	return m.images.Get(imageScope(call), ref)
}

// PruneImages removes the caller's own images that no sandbox runs on (the built-in
// and public images stay) and returns their names and unpacked bytes.
func (m *Manager) PruneImages(ctx context.Context, call Call) ([]string, int64, error) {
	list, err := m.images.List(imageScope(call))
	if err != nil {
		return nil, 0, err
	}
	users := m.ImageUsers(ctx, call.Owner)
	removed := []string{}
	var gone []*Image
	for _, img := range list {
		if img.Builtin || img.Public || img.Owner != call.Owner || img.Name == "" || len(users(img.Digest)) > 0 {
			continue
		}
		if err := m.images.Remove(image.Scope{Owner: call.Owner}, img.Name, users); err != nil {
			return removed, m.freed(gone), err
		}
		removed = append(removed, img.Name)
		gone = append(gone, img)
	}
	return removed, m.freed(gone), nil
}

// freed is how many unpacked bytes removing the images gone gave back: each of their
// layers that is no longer on disk, once, however many of them had it. A layer another
// image (or a sandbox, or a pull under way) still uses stays, and is not counted.
func (m *Manager) freed(gone []*Image) int64 {
	var n int64
	counted := map[string]bool{}
	for _, img := range gone {
		if len(img.LayerSizes) != len(img.Layers) { // a record older than layer sizes
			if !slices.ContainsFunc(img.Layers, m.images.HasLayer) {
				n += img.Size
			}
			continue
		}
		for i, l := range img.Layers {
			if !counted[l] && !m.images.HasLayer(l) {
				counted[l] = true
				n += img.LayerSizes[i]
			}
		}
	}
	return n
}

// evictImages holds the image store to its cap, evicting pulled images no sandbox of
// any owner runs on, least recently used first.
func (m *Manager) evictImages(ctx context.Context) {
	if m.cfg.ImageCacheMax <= 0 {
		return
	}
	removed, err := m.images.Evict(m.cfg.ImageCacheMax, m.ImageUsers(ctx, ""))
	if err != nil {
		m.log.Warn("evict images over the cache cap", "err", err)
	}
	for _, d := range removed {
		m.log.Info("evicted an image over the cache cap", "digest", d)
	}
}
