package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/objstore"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
)

// objectStores are the object stores the remote tests run on: a directory, and a
// bucket on a real S3 server (SeaweedFS; skipped without it outside CI).
var objectStores = []struct {
	name string
	open func(t *testing.T) objstore.Store
}{
	{"dir", func(t *testing.T) objstore.Store {
		o, err := objstore.OpenDir(filepath.Join(t.TempDir(), "bucket"))
		must(t, err)
		return o
	}},
	{"s3", func(t *testing.T) objstore.Store {
		srv := s3test.Start(t)
		cfg := srv.Config("snapshots")
		cfg.Prefix = "cluster-a/"
		o, err := objstore.OpenS3(context.Background(), cfg)
		must(t, err)
		return o
	}},
}

// node opens a snapshot store in a state directory of its own, sharing objs.
func node(t *testing.T, objs objstore.Store, grace time.Duration) *Store {
	t.Helper()
	s := newStore(t)
	s.UseObjects(objs, grace)
	return s
}

func objectKeys(t *testing.T, o objstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	must(t, o.List(context.Background(), prefix, func(in objstore.Info) error {
		keys = append(keys, in.Key)
		return nil
	}))
	return keys
}

// A snapshot taken on one node restores on another that shares only the bucket, byte
// for byte, and deleting it there removes its objects.
func TestObjectsSnapshotMovesBetweenNodes(t *testing.T) {
	requireRoot(t)
	for _, st := range objectStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			objs := st.open(t)
			a, b := node(t, objs, time.Nanosecond), node(t, objs, time.Nanosecond)
			src := fullLayer(t, baseA)
			want := describe(t, src, baseA)
			m, err := a.Create(ctx, src, baseA, meta("sb_one"))
			if err != nil {
				t.Fatalf("Create on A: %v", err)
			}
			if m.Location != objs.Where() {
				t.Errorf("Location = %q, want %q", m.Location, objs.Where())
			}
			if keys := objectKeys(t, objs, "snapshots/pending/"); len(keys) != 0 {
				t.Errorf("pending markers left after Create: %v", keys)
			}
			got, err := b.Get(m.ID)
			if err != nil {
				t.Fatalf("Get on B: %v", err)
			}
			if got.State != StateReady || len(got.Entries) != len(m.Entries) {
				t.Fatalf("Get on B: state %q with %d entries, want ready with %d", got.State, len(got.Entries), len(m.Entries))
			}
			if len(chunkFiles(t, b)) != 0 {
				t.Fatalf("B has chunks before it restores")
			}
			dst := filepath.Join(t.TempDir(), "restored")
			if err := b.Restore(ctx, m.ID, dst, baseB); err != nil {
				t.Fatalf("Restore on B: %v", err)
			}
			if d := diffTrees(describe(t, dst, baseB), want); d != "" {
				t.Errorf("tree restored on B differs from the original on A:\n%s", d)
			}
			if err := b.Verify(ctx, m.ID); err != nil {
				t.Errorf("Verify on B: %v", err)
			}

			if err := b.Delete(m.ID, nil); err != nil {
				t.Fatalf("Delete on B: %v", err)
			}
			if keys := objectKeys(t, objs, "snapshots/"); len(keys) != 0 {
				t.Errorf("objects left after the only snapshot was deleted: %v", keys)
			}
		})
	}
}

// sharingTwo takes two snapshots on a whose layer (returned) shares a file of two
// chunks; the second has a third chunk of its own.
func sharingTwo(t *testing.T, a *Store, objs objstore.Store) (src string, one, two *Manifest) {
	t.Helper()
	ctx := context.Background()
	src = newLayer(t, baseA)
	put(t, src, "same", randBytes(1, ChunkSize+10), 0o644, baseA, 0)
	one, err := a.Create(ctx, src, baseA, meta("sb_one"))
	must(t, err)
	put(t, src, "other", randBytes(2, 100), 0o644, baseA, 0)
	two, err = a.Create(ctx, src, baseA, meta("sb_one"))
	must(t, err)
	if chunks := objectKeys(t, objs, "snapshots/chunks/"); len(chunks) != 3 {
		t.Fatalf("bucket holds %d chunks, want 3 (two of the shared file, one of the other): %v", len(chunks), chunks)
	}
	return src, one, two
}

// Chunks are shared across snapshots in the bucket: deleting one snapshot keeps the
// chunks another still names, and within the grace period keeps unreferenced ones too.
func TestObjectsDeleteKeepsSharedChunks(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	objs := objectStores[0].open(t)
	a := node(t, objs, time.Nanosecond)
	src, one, two := sharingTwo(t, a, objs)
	must(t, a.Delete(one.ID, nil))
	if got := objectKeys(t, objs, "snapshots/chunks/"); len(got) != 3 {
		t.Errorf("after deleting the first snapshot the bucket holds %v, want all 3 chunks (the second names them)", got)
	}
	// Another node's Create in progress protects the chunks it lists.
	pending := &Manifest{ID: "snap_pending", Entries: two.Entries}
	body, _ := json.Marshal(pending)
	must(t, putJSON(ctx, objs, pendingKey(pending.ID), body))
	must(t, a.Delete(two.ID, nil))
	if got := objectKeys(t, objs, "snapshots/chunks/"); len(got) != 3 {
		t.Errorf("with a pending Create naming them the bucket holds %v, want all 3 chunks", got)
	}
	must(t, objs.Delete(ctx, pendingKey(pending.ID)))

	// Within the grace period nothing is collected.
	c := node(t, objs, time.Hour)
	three, err := c.Create(ctx, src, baseA, meta("sb_one"))
	must(t, err)
	must(t, c.Delete(three.ID, nil))
	if got := objectKeys(t, objs, "snapshots/chunks/"); len(got) != 3 {
		t.Errorf("within the grace period the bucket holds %v, want the 3 chunks kept", got)
	}
	if got := objectKeys(t, objs, "snapshots/manifests/"); len(got) != 0 {
		t.Errorf("manifests left after every snapshot was deleted: %v", got)
	}
}

// manifestReads is an object store that counts the manifests and pending markers read.
type manifestReads struct {
	objstore.Store
	n atomic.Int64
}

func (o *manifestReads) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasSuffix(key, ".json") {
		o.n.Add(1)
	}
	return o.Store.Get(ctx, key)
}

// setBound sets a bound of the gc pass for the rest of t.
func setBound[T any](t *testing.T, bound *T, v T) {
	old := *bound
	*bound = v
	t.Cleanup(func() { *bound = old })
}

// A Delete's gc pass is bounded: it reads at most gcManifests manifests, and removes
// nothing when there are more (their chunks may be live); it considers at most gcChunks
// chunks, so the rest wait for later passes; within the bounds, a deleted snapshot's
// chunks are removed and those another snapshot names are kept.
func TestObjectsGCBounded(t *testing.T) {
	requireRoot(t)
	for _, st := range objectStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			objs := &manifestReads{Store: st.open(t)}
			a := node(t, objs, time.Nanosecond)
			src, one, two := sharingTwo(t, a, objs)

			manifests := gcManifests
			setBound(t, &gcManifests, 0)
			objs.n.Store(0)
			must(t, a.Delete(two.ID, nil))
			if n := objs.n.Load(); n != 0 {
				t.Errorf("a gc pass bounded to 0 manifests read %d", n)
			}
			if got := objectKeys(t, objs, "snapshots/chunks/"); len(got) != 3 {
				t.Errorf("a gc pass that could not read every manifest left %v; want all 3 chunks kept", got)
			}
			gcManifests = manifests

			setBound(t, &gcChunks, 1)
			put(t, src, "third", randBytes(3, 100), 0o644, baseA, 0)
			three, err := a.Create(ctx, src, baseA, meta("sb_one"))
			must(t, err)
			must(t, a.Delete(three.ID, nil)) // two garbage chunks now: two's and three's own
			if got := objectKeys(t, objs, "snapshots/chunks/"); len(got) < 3 {
				t.Errorf("a gc pass bounded to 1 chunk left %d of 4 chunks; want at most one removed", len(got))
			}
			for range 256 { // every prefix comes first once
				if len(objectKeys(t, objs, "snapshots/chunks/")) == 2 {
					break
				}
				must(t, a.collectObjects(ctx))
			}
			left := objectKeys(t, objs, "snapshots/chunks/")
			for _, e := range one.Entries {
				for _, c := range e.Chunks {
					h, _ := digestHex(c.Digest)
					if !slices.Contains(left, chunkKey(h)) {
						t.Errorf("chunk %s of the snapshot still there was removed", h)
					}
				}
			}
			if len(left) != 2 {
				t.Errorf("after passes from every prefix the bucket holds %v; want only the 2 chunks of %s", left, one.ID)
			}
		})
	}
}

// The bucket is hostile: a chunk overwritten, truncated or removed there is refused
// when another node restores, and nothing is restored.
func TestObjectsCorruptChunkRefused(t *testing.T) {
	requireRoot(t)
	for _, st := range objectStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			objs := st.open(t)
			a := node(t, objs, time.Hour)
			src := newLayer(t, baseA)
			body := randBytes(3, 2*ChunkSize+5)
			put(t, src, "data.bin", body, 0o644, baseA, 0)
			m, err := a.Create(ctx, src, baseA, meta("sb_one"))
			must(t, err)
			h, _ := digestHex(m.Entries[1].Chunks[1].Digest)
			key := chunkKey(h)
			good := body[ChunkSize : 2*ChunkSize]
			for _, c := range []struct {
				name, want string
				content    []byte // nil: removed
			}{
				{"overwritten", "does not match its digest", randBytes(4, ChunkSize)},
				{"truncated", "is truncated", good[:1000]},
				{"longer", "is longer than recorded", append(bytes.Clone(good), 'x')},
				{"removed", "is missing", nil},
			} {
				t.Run(c.name, func(t *testing.T) {
					if c.content == nil {
						must(t, objs.Delete(ctx, key))
					} else {
						must(t, objs.Put(ctx, key, bytes.NewReader(c.content), int64(len(c.content)), sumOf(c.content)))
					}
					b := node(t, objs, time.Hour)
					dst := filepath.Join(t.TempDir(), "restored")
					err := b.Restore(ctx, m.ID, dst, baseB)
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), h) {
						t.Fatalf("Restore from a bucket whose chunk is %s: %v; want ErrCorrupt naming the chunk and saying it %s", c.name, err, c.want)
					}
					if _, err := os.Lstat(dst); err == nil {
						t.Errorf("restore left %s behind", dst)
					}
					if _, err := os.Lstat(dst + ".tmp"); err == nil {
						t.Errorf("restore left %s.tmp behind", dst)
					}
					if err := b.Verify(ctx, m.ID); !errors.Is(err, ErrCorrupt) {
						t.Errorf("Verify: %v, want ErrCorrupt", err)
					}
					if files := chunkFiles(t, b); len(files) > 0 {
						for _, f := range files {
							if f == h {
								t.Errorf("the bad chunk was kept in B's state directory")
							}
						}
					}
				})
			}
		})
	}
}

// A manifest in the bucket is validated like any other before a node keeps it.
func TestObjectsHostileManifestRefused(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	objs := objectStores[0].open(t)
	b := node(t, objs, time.Hour)
	for _, c := range []struct{ name, body string }{
		{"not json", "{"},
		{"another id", `{"id":"snap_other","state":"ready","entries":[{"path":".","type":"dir"}]}`},
		{"escaping path", `{"id":"snap_evil","state":"ready","entries":[{"path":".","type":"dir"},{"path":"../x","type":"dir"}]}`},
		{"creating", `{"id":"snap_evil","state":"creating","entries":[{"path":".","type":"dir"}]}`},
	} {
		id := "snap_evil"
		must(t, putJSON(ctx, objs, manifestKey(id), []byte(c.body)))
		if _, err := b.Get(id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Get = %v, want ErrCorrupt", c.name, err)
		}
		if l, _ := b.List(""); len(l) != 0 {
			t.Errorf("%s: the node kept %d snapshots from a bad manifest", c.name, len(l))
		}
	}
	// The memory part of a manifest is this node's own: a bucket's copy names none.
	must(t, putJSON(ctx, objs, manifestKey("snap_mem"), []byte(`{"id":"snap_mem","state":"ready","entries":[{"path":".","type":"dir"}],`+
		`"memory":{"bytes":1,"files":[{"name":"../../../etc/passwd","size":1,"sha256":"00"}]}}`)))
	if m, err := b.Get("snap_mem"); err != nil || m.Memory != nil {
		t.Errorf("Get of a bucket manifest naming a memory image = %+v, %v; want it kept without its memory part", m, err)
	}
	if m, err := b.readManifest("snap_mem"); err != nil || m.Memory != nil {
		t.Errorf("the manifest kept on the node = %+v, %v; want it without a memory part", m, err)
	}
	if _, err := b.Get("snap_absent"); err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("Get of a snapshot in no store: %v, want not found", err)
	}
}
