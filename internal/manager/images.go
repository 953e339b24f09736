package manager

import (
	"context"
	"slices"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
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
		if img, err := m.images.Get(imageScope(call), name); err == nil {
			if fn != nil {
				fn(PullEvent{Ref: req.Ref, Status: "present"})
			}
			return img, nil
		}
	}
	return m.images.Pull(ctx, imageScope(call), image.PullRequest{Ref: req.Ref, Name: req.Name, Public: req.Public,
		Users: m.ImageUsers(ctx, call.Owner), Username: req.Username, Password: req.Password,
		Insecure: slices.Contains(m.cfg.InsecureRegistries, image.RegistryOf(req.Ref))}, fn)
}
