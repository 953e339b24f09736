package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/durable"
)

// Pulls keep two kinds of small records beside the layers, each a file written
// temp+rename:
//
//	blobs/<hex>.json    a layer blob that was downloaded and verified: the diff id it
//	                    unpacks to, and the registries it was verified from
//	pending/<hex>.json  a pull that has not succeeded yet: whose, from where, when, and
//	                    the layers it unpacked
//
// Collection deletes a blob note with its layer, and keeps the layers of a pending
// pull for pendingTTL after the pull last unpacked one.

// pendingTTL is how long the layers of a pull that failed or was cancelled are kept
// for a retry.
const pendingTTL = 24 * time.Hour

// blobNote says that a blob, fetched from each of Registries and checked against its
// digest, unpacked to the layer DiffID.
type blobNote struct {
	DiffID     string   `json:"diff_id"`
	Registries []string `json:"registries"`
}

func (s *Store) blobNotePath(blob string) string {
	return s.path("blobs", hexOf(blob)+".json")
}

func (s *Store) readBlobNote(blob string) (blobNote, error) {
	var n blobNote
	b, err := os.ReadFile(s.blobNotePath(blob))
	if err != nil {
		return n, err
	}
	err = json.Unmarshal(b, &n)
	return n, err
}

// noteBlob records that the blob, downloaded from registry and verified, unpacked to
// the layer diffID. Two pulls noting one blob at once may lose one registry of the
// note; a later pull from it then downloads the blob again.
func (s *Store) noteBlob(blob, diffID, registry string) error {
	if !validDigest(blob) {
		return nil
	}
	n, err := s.readBlobNote(blob)
	if err != nil || n.DiffID != diffID {
		n = blobNote{DiffID: diffID}
	}
	if slices.Contains(n.Registries, registry) {
		return nil
	}
	n.Registries = append(n.Registries, registry)
	b, err := json.Marshal(&n)
	if err != nil {
		return err
	}
	return durable.WriteFile(s.blobNotePath(blob), b, 0o600)
}

// blobNoted reports whether blob was verified, once downloaded from registry, to
// unpack to diffID.
func (s *Store) blobNoted(blob, diffID, registry string) bool {
	if !validDigest(blob) {
		return false
	}
	n, err := s.readBlobNote(blob)
	return err == nil && n.DiffID == diffID && slices.Contains(n.Registries, registry)
}

// pendingPull is the record of a pull that has not succeeded yet.
type pendingPull struct {
	Owner     string         `json:"owner"`
	Reference string         `json:"reference"`
	Layers    []pendingLayer `json:"layers"`
	Updated   time.Time      `json:"updated"`
}

type pendingLayer struct {
	DiffID string `json:"diff_id"`
	Blob   string `json:"blob,omitempty"` // the blob the store keeps for it
	Size   int64  `json:"size"`           // unpacked bytes, counted in the owner's quota
}

// pendingRecord is the pending record of one pull in progress; its methods are safe
// for concurrent use.
type pendingRecord struct {
	s    *Store
	path string
	mu   sync.Mutex
	p    pendingPull
}

// openPending returns the record of owner's pull of reference, holding the layers a
// former attempt left that are still there.
func (s *Store) openPending(owner, reference string) *pendingRecord {
	sum := sha256.Sum256([]byte(owner + "\x00" + reference))
	r := &pendingRecord{s: s, path: s.path("pending", hex.EncodeToString(sum[:])+".json"),
		p: pendingPull{Owner: owner, Reference: reference}}
	if old, err := readPending(r.path); err == nil && old.Owner == owner && old.Reference == reference {
		for _, l := range old.Layers {
			if _, err := os.Lstat(s.path("layers", hexOf(l.DiffID))); err == nil {
				r.p.Layers = append(r.p.Layers, l)
			}
		}
	}
	return r
}

// add records that the pull unpacked the layer diffID from blob, before anything may
// collect either.
func (r *pendingRecord) add(diffID, blob string, size int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.ContainsFunc(r.p.Layers, func(l pendingLayer) bool { return l.DiffID == diffID }) {
		r.p.Layers = append(r.p.Layers, pendingLayer{DiffID: diffID, Blob: blob, Size: size})
	}
	r.p.Updated = r.s.now().UTC()
	b, err := json.Marshal(&r.p)
	if err != nil {
		return err
	}
	return durable.WriteFile(r.path, b, 0o600)
}

// remove drops the record once the pull succeeded: its image keeps the layers now.
func (r *pendingRecord) remove() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func readPending(path string) (pendingPull, error) {
	var p pendingPull
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	err = json.Unmarshal(b, &p)
	return p, err
}

// pendings returns the pending pulls that still keep their layers, and the paths of
// those that no longer do (older than pendingTTL, or unreadable).
func (s *Store) pendings() (live []pendingPull, stale []string, _ error) {
	ents, err := os.ReadDir(s.path("pending"))
	if err != nil {
		return nil, nil, err
	}
	now := s.now()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		path := s.path("pending", e.Name())
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		var p pendingPull
		if json.Unmarshal(b, &p) != nil || now.Sub(p.Updated) >= pendingTTL {
			stale = append(stale, path)
			continue
		}
		live = append(live, p)
	}
	return live, stale, nil
}
