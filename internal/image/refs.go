package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// LegacyOwner owns the names of a store written before images had owners: they become
// its private images. It is the owner of the node's local (unix socket) users.
const LegacyOwner = "local"

// Scope is who asks: an owner, and whether it is an administrator. Names and digests
// resolve to the owner's own images and to public ones; only an administrator may
// publish, replace or remove a public image.
type Scope struct {
	Owner string
	Admin bool
}

// ref points one owner's name (or, with no name, an image the owner keeps by digest
// after its name moved on) at an image. Public refs are seen by every owner; their
// owner is the administrator who published them. The host image's ref has no owner.
type ref struct {
	Owner  string `json:"owner"`
	Name   string `json:"name,omitempty"`
	Digest string `json:"digest"`
	Public bool   `json:"public,omitempty"`
	// Reference is the registry reference the owner pulled the image from, kept here
	// rather than in the shared record so that no owner learns another's.
	Reference string `json:"reference,omitempty"`
}

// refTable is every ref of the store, as kept in refs.json.
type refTable struct {
	Refs []ref `json:"refs"`
}

// visible reports whether sc sees r.
func (r ref) visible(sc Scope) bool { return r.Public || (r.Owner == sc.Owner && sc.Owner != "") }

// changeable reports whether sc may untag or replace r.
func (r ref) changeable(sc Scope) bool {
	if r.Public {
		return sc.Admin && r.Name != HostName
	}
	return r.Owner == sc.Owner && sc.Owner != ""
}

// byName returns the index of the ref name resolves to for sc: its own private one,
// else the public one; -1 when there is none.
func (t *refTable) byName(sc Scope, name string) int {
	pub := -1
	for i, r := range t.Refs {
		if r.Name != name || !r.visible(sc) {
			continue
		}
		if !r.Public {
			return i
		}
		pub = i
	}
	return pub
}

// find returns the index of the ref with exactly this owner, name and visibility, or -1.
func (t *refTable) find(owner, name string, public bool) int {
	for i, r := range t.Refs {
		if r.Name == name && r.Public == public && (public || r.Owner == owner) {
			return i
		}
	}
	return -1
}

// pointsAt reports whether any ref points at digest.
func (t *refTable) pointsAt(digest string) bool {
	return slices.ContainsFunc(t.Refs, func(r ref) bool { return r.Digest == digest })
}

// visibleDigests lists the digests sc sees: through its refs and the public ones.
func (t *refTable) visibleDigests(sc Scope) map[string]bool {
	out := map[string]bool{}
	for _, r := range t.Refs {
		if r.visible(sc) {
			out[r.Digest] = true
		}
	}
	return out
}

// nameFor returns the ref sc knows digest by: its own named one first, then a public
// one, then its own unnamed one; among equals the first name in order.
func (t *refTable) nameFor(sc Scope, digest string) (ref, bool) {
	rank := func(r ref) int {
		switch {
		case r.Name == "":
			return 2
		case r.Public:
			return 1
		}
		return 0
	}
	var best ref
	found := false
	for _, r := range t.Refs {
		if r.Digest != digest || !r.visible(sc) {
			continue
		}
		if !found || rank(r) < rank(best) || (rank(r) == rank(best) && r.Name < best.Name) {
			best, found = r, true
		}
	}
	return best, found
}

// readRefs reads refs.json. A store written before images had owners keeps names.json
// (name -> digest): its names are read as private images of LegacyOwner, and the host
// image's name as the public host ref.
func (s *Store) readRefs() (*refTable, error) {
	t := &refTable{}
	b, err := os.ReadFile(s.path("refs.json"))
	if err == nil {
		if err := json.Unmarshal(b, t); err != nil {
			return nil, fmt.Errorf("refs.json: %w", err)
		}
		return t, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	names := map[string]string{}
	b, err = os.ReadFile(s.path("names.json"))
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("names.json: %w", err)
	}
	for n, d := range names {
		if n == HostName {
			t.Refs = append(t.Refs, ref{Name: n, Digest: d, Public: true})
		} else {
			t.Refs = append(t.Refs, ref{Owner: LegacyOwner, Name: n, Digest: d})
		}
	}
	slices.SortFunc(t.Refs, func(a, b ref) int { return strings.Compare(a.Name, b.Name) })
	return t, nil
}

// writeRefs stores t in refs.json and drops a legacy names.json, whose names t holds.
// The caller holds meta.lock.
func (s *Store) writeRefs(t *refTable) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.path("refs.json"), b, 0o600); err != nil {
		return err
	}
	if err := os.Remove(s.path("names.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// migrateLocked writes refs.json for a store that only has the names.json of a
// version without owners. The caller holds meta.lock.
func (s *Store) migrateLocked() error {
	if _, err := os.Stat(s.path("refs.json")); err == nil {
		return nil
	}
	t, err := s.readRefs()
	if err != nil {
		return err
	}
	return s.writeRefs(t)
}

// publicOnly is the error for a change to a public image by an owner who is not an
// administrator.
func publicOnly(verb, name string) error {
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied,
		Msg: fmt.Sprintf("cannot %s %q: it is a public image, which only an administrator (over the unix socket) can change", verb, name)}
}

// resolve maps ref (a name, a digest, or a digest prefix of at least 12 hex digits) to
// a digest sc sees. A name is sc's own image of that name, else the public one. What
// sc does not see is not found, whether or not it exists.
func (s *Store) resolve(sc Scope, t *refTable, refStr string) (digest string, idx int, err error) {
	if i := t.byName(sc, refStr); i >= 0 {
		return t.Refs[i].Digest, i, nil
	}
	h := strings.TrimPrefix(refStr, "sha256:")
	if len(h) >= 12 && len(h) <= 64 && isHex(h) {
		seen := t.visibleDigests(sc)
		if sc.Admin {
			// An administrator also sees images no ref points at any more (kept for the
			// sandboxes still on them), to remove them.
			all, err := s.digests()
			if err != nil {
				return "", -1, err
			}
			for _, d := range all {
				if !t.pointsAt(d) {
					seen[d] = true
				}
			}
		}
		var found []string
		for d := range seen {
			if strings.HasPrefix(hexOf(d), h) {
				found = append(found, d)
			}
		}
		if len(found) == 1 {
			return found[0], -1, nil
		}
		if len(found) > 1 {
			return "", -1, errdefs.NotFound("image %q is ambiguous: %d images have that digest prefix", refStr, len(found))
		}
	}
	return "", -1, errdefs.NotFound("image %q not found", refStr)
}

// usage sums the sizes of the distinct images owner keeps privately, leaving out the
// image skip, and of the layers its pending pulls keep, leaving out skipLayers.
func (s *Store) usage(t *refTable, owner, skip string, skipLayers []string) (int64, error) {
	var total int64
	seen := map[string]bool{skip: true}
	for _, r := range t.Refs {
		if r.Public || r.Owner != owner || seen[r.Digest] {
			continue
		}
		seen[r.Digest] = true
		img, err := s.readRecord(r.Digest)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		total += img.Size
	}
	pending, _, err := s.pendings()
	if err != nil {
		return 0, err
	}
	counted := map[string]bool{}
	for _, l := range skipLayers {
		counted[l] = true
	}
	for _, p := range pending {
		if p.Owner != owner {
			continue
		}
		for _, l := range p.Layers {
			if !counted[l.DiffID] {
				counted[l.DiffID] = true
				total += l.Size
			}
		}
	}
	return total, nil
}
