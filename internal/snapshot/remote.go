package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/objstore"
)

// With an object store (UseObjects), every snapshot is kept there too, under keys that
// any node sharing the bucket computes alike:
//
//	snapshots/chunks/<hex[:2]>/<hex>   a chunk, named by its sha256, shared by every
//	                                   snapshot and node that has that content
//	snapshots/pending/<id>.json        a Create in progress: its manifest, so gc spares
//	                                   the chunks it is uploading
//	snapshots/manifests/<id>.json      a ready snapshot, put after all its chunks: a
//	                                   manifest in the bucket means its chunks are there
//
// The state directory is then a cache: a node that lacks a snapshot reads its manifest
// from the bucket (Get), and the chunks it lacks when it verifies or restores it, each
// checked against its name before it is kept. The bucket is hostile input: a manifest
// is validated like any other, a chunk that is missing, short, long or not matching
// its digest is refused as ErrCorrupt, naming where it was read.
//
// Objects are collected by Delete, which removes the snapshot's manifest and then
// every chunk that no manifest and no pending Create in the bucket names and that is
// older than the grace period (DefaultGrace). A Create re-uploads a chunk it would
// reuse when that chunk is older than half the grace period, and gc reads a chunk's
// time again just before removing it, so a chunk a concurrent Create counts on is
// young, and spared. The store leaves garbage (a chunk younger than the grace, a
// delete that failed) rather than risk a live chunk; the next Delete collects it. One
// Delete's pass is bounded in chunks listed and manifests read (gcChunks, gcManifests,
// gcManifestBytes), not by the size of the bucket.

// DefaultGrace is how old an unreferenced object must be before gc removes it.
const DefaultGrace = 24 * time.Hour

// maxManifest bounds a manifest read from the object store.
const maxManifest = 256 << 20

// remoteTimeout bounds the object store calls of Get and Delete, which take no context.
const remoteTimeout = 10 * time.Minute

// UseObjects keeps every snapshot created from now on in objs too, and lets Get,
// Verify and Restore fetch from it what this node lacks. Unreferenced objects younger
// than grace are never removed (0: DefaultGrace). Call it before the store is used.
func (s *Store) UseObjects(objs objstore.Store, grace time.Duration) {
	if grace == 0 {
		grace = DefaultGrace
	}
	s.objs, s.grace = objs, grace
}

func chunkKey(hexSum string) string { return "snapshots/chunks/" + hexSum[:2] + "/" + hexSum }
func manifestKey(id string) string  { return "snapshots/manifests/" + id + ".json" }
func pendingKey(id string) string   { return "snapshots/pending/" + id + ".json" }
func digestOfKey(key string) string { return "sha256:" + path.Base(key) }
func sumOf(b []byte) string         { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
func putJSON(ctx context.Context, o objstore.Store, key string, b []byte) error {
	return o.Put(ctx, key, bytes.NewReader(b), int64(len(b)), sumOf(b))
}

// upload puts the chunks of m (ready but for its state) and then its manifest in the
// object store, and records where in m.
func (s *Store) upload(ctx context.Context, m *Manifest) error {
	pending, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := putJSON(ctx, s.objs, pendingKey(m.ID), pending); err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	defer s.objs.Delete(context.WithoutCancel(ctx), pendingKey(m.ID)) // a leftover only delays gc
	uses := chunkUses(m)
	err = parallel(ctx, len(uses), func(ctx context.Context, i int, buf []byte) error {
		u := uses[i]
		in, err := s.objs.Stat(ctx, chunkKey(u.hex))
		if err == nil && in.Size == u.size && time.Since(in.Modified) < s.grace/2 {
			return nil // there, and young enough that no gc takes it before m is put
		}
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("object store: %w", err)
		}
		data, err := s.loadChunk(m.ID, u, buf)
		if err != nil {
			return err
		}
		if err := s.objs.Put(ctx, chunkKey(u.hex), bytes.NewReader(data), u.size, u.hex); err != nil {
			return fmt.Errorf("object store: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	m.Location = s.objs.Where()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := putJSON(ctx, s.objs, manifestKey(m.ID), b); err != nil {
		m.Location = ""
		return fmt.Errorf("object store: %w", err)
	}
	return nil
}

// importManifest reads snapshot id from the object store and keeps it here, as if it
// had been created here (its chunks are fetched when it is verified or restored).
func (s *Store) importManifest(id string) (*Manifest, error) {
	s.importMu.Lock()
	defer s.importMu.Unlock()
	s.mu.Lock()
	_, ok := s.heads[id]
	s.mu.Unlock()
	if ok { // imported meanwhile
		return s.Get(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	r, err := s.objs.Get(ctx, manifestKey(id))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, errdefs.NotFound("snapshot %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: object store: %w", id, err)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: object store: %w", id, err)
	}
	where := s.objs.Where() + manifestKey(id)
	var m Manifest
	switch {
	case len(b) > maxManifest:
		err = fmt.Errorf("is larger than %d bytes", maxManifest)
	default:
		err = json.Unmarshal(b, &m)
	}
	if err == nil && m.ID != id {
		err = fmt.Errorf("names snapshot %q", m.ID)
	}
	if err == nil && m.State != StateReady {
		err = fmt.Errorf("is %q, not ready", m.State)
	}
	if err == nil {
		err = validate(&m)
	}
	if err != nil {
		return nil, errdefs.Precondition("snapshot %s is corrupt: its manifest at %s %v", id, where, err).
			WithDetails(map[string]any{"reason": "snapshot_corrupt", "snapshot_id": id}).WithCause(ErrCorrupt)
	}
	m.Location, m.Imported = s.objs.Where(), true
	// A memory image stays on the node that took it: what the bucket's copy says of
	// one names nothing here, and its file names are not this node's to follow.
	m.Memory = nil
	s.gc.RLock()
	defer s.gc.RUnlock()
	if err := s.writeManifest(&m); err != nil {
		return nil, err
	}
	s.addRefs(&m)
	s.setHead(&m)
	return &m, nil
}

// fetch copies from the object store the chunks of m this node lacks, each checked
// against its digest before it is kept; the caller holds gc shared.
func (s *Store) fetch(ctx context.Context, m *Manifest) error {
	if s.objs == nil || m.Location == "" {
		return nil
	}
	var missing []chunkUse
	for _, u := range chunkUses(m) {
		var st unix.Stat_t
		err := unix.Lstat(s.chunkPath(u.hex), &st)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != u.size {
			missing = append(missing, u)
		}
	}
	touched := map[string]bool{}
	for _, u := range missing {
		touched[u.hex[:2]] = true
	}
	err := parallel(ctx, len(missing), func(ctx context.Context, i int, buf []byte) error {
		u := missing[i]
		data, err := s.fetchChunk(ctx, m.ID, u, buf)
		if err != nil {
			return err
		}
		_, err = s.putChunk(u.hex, data)
		return err
	})
	if err != nil {
		return err
	}
	for d := range touched {
		if err := durable.SyncDir(path.Join(s.dir, "chunks", d)); err != nil {
			return err
		}
	}
	return nil
}

// fetchChunk reads chunk u from the object store into buf (ChunkSize+1 bytes) and
// checks its size and digest.
func (s *Store) fetchChunk(ctx context.Context, id string, u chunkUse, buf []byte) ([]byte, error) {
	key := chunkKey(u.hex)
	bad := func(what string) error {
		return corrupt(id, "sha256:"+u.hex, u.path, "in the object store ("+s.objs.Where()+key+") "+what)
	}
	if u.size <= 0 || u.size > ChunkSize {
		return nil, bad(fmt.Sprintf("has an impossible size %d", u.size))
	}
	r, err := s.objs.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, bad("is missing")
	}
	if err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	defer r.Close()
	n, err := io.ReadFull(r, buf[:u.size+1])
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		if int64(n) < u.size {
			return nil, bad("is truncated")
		}
	case err != nil:
		return nil, fmt.Errorf("object store: read %s: %w", key, err)
	default:
		return nil, bad("is longer than recorded")
	}
	data := buf[:u.size]
	if sumOf(data) != u.hex {
		return nil, bad("does not match its digest")
	}
	return data, nil
}

// deleteRemote removes the manifest of snapshot id from the object store, so no node
// restores it any more.
func (s *Store) deleteRemote(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	if err := s.objs.Delete(ctx, manifestKey(id)); err != nil {
		return fmt.Errorf("snapshot %s: object store: %w", id, err)
	}
	return nil
}

// Bounds of one gc pass (collectObjects), so a Delete's work does not grow with the
// bucket: it considers at most gcChunks chunks past the grace, listed from a prefix that
// moves on with every pass so that live chunks early in the listing do not hide garbage
// after them, and reads at most gcManifests manifests and pending markers of at most
// gcManifestBytes in all. A bucket past a bound keeps its garbage for a later pass
// (with more manifests than gcManifests, for good): nothing is removed unless every
// manifest was read.
var (
	gcChunks        = 10_000
	gcManifests     = 10_000
	gcManifestBytes = int64(1 << 30)
)

// errGCBound stops a listing at a bound of the gc pass.
var errGCBound = errors.New("gc bound reached")

// collectObjects removes the chunks in the object store that no manifest and no
// pending Create names and that are older than the grace period. It is best effort:
// what it cannot read or remove stays for the next call.
func (s *Store) collectObjects(ctx context.Context) error {
	start := time.Now()
	old := map[string]time.Time{} // chunk key -> its time when listed
	s.mu.Lock()
	from := s.gcFrom
	s.gcFrom++
	s.mu.Unlock()
	for i := range 256 {
		prefix := fmt.Sprintf("snapshots/chunks/%02x/", (int(from)+i)%256)
		err := s.objs.List(ctx, prefix, func(in objstore.Info) error {
			if _, ok := digestHex(digestOfKey(in.Key)); ok && start.Sub(in.Modified) >= s.grace {
				old[in.Key] = in.Modified
			}
			if len(old) >= gcChunks {
				return errGCBound
			}
			return nil
		})
		if errors.Is(err, errGCBound) {
			break
		}
		if err != nil {
			return err
		}
	}
	if len(old) == 0 {
		return nil
	}
	// Listed after the chunks: a Create that began since has its pending manifest here,
	// or puts every chunk it reuses that is this old again.
	var read int
	var size int64
	for _, dir := range []string{"snapshots/manifests/", "snapshots/pending/"} {
		err := s.objs.List(ctx, dir, func(in objstore.Info) error {
			if len(old) == 0 {
				return errGCBound // every candidate is live: nothing to remove
			}
			if read++; read > gcManifests {
				return fmt.Errorf("object store gc: more than %d manifests to read; unreferenced chunks are kept", gcManifests)
			}
			if size += in.Size; size > gcManifestBytes {
				return fmt.Errorf("object store gc: manifests of more than %d bytes to read; unreferenced chunks are kept", gcManifestBytes)
			}
			return s.spare(ctx, in.Key, old)
		})
		if errors.Is(err, errGCBound) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	for key, listed := range old {
		in, err := s.objs.Stat(ctx, key)
		if err != nil || !in.Modified.Equal(listed) {
			continue // gone, or put again since it was listed
		}
		if err := s.objs.Delete(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

// spare removes from candidates the chunks the manifest at key names. A manifest that
// cannot be read makes gc stop: its chunks may be live. Only the chunk digests of the
// manifest are decoded.
func (s *Store) spare(ctx context.Context, key string, candidates map[string]time.Time) error {
	if !strings.HasSuffix(key, ".json") {
		return nil
	}
	r, err := s.objs.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil // deleted since it was listed
	}
	if err != nil {
		return err
	}
	defer r.Close()
	var m struct {
		Entries []struct {
			Chunks []struct {
				Digest string `json:"digest"`
			} `json:"chunks"`
		} `json:"entries"`
	}
	if err := json.NewDecoder(io.LimitReader(r, maxManifest)).Decode(&m); err != nil {
		return fmt.Errorf("object store: manifest %s: %w", key, err)
	}
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if h, ok := digestHex(c.Digest); ok {
				delete(candidates, chunkKey(h))
			}
		}
	}
	return nil
}
