package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
)

// Snapshots and forks that keep memory. Under runsc a running sandbox's memory and
// processes can be saved while it runs on (runtime.Checkpointer.CheckpointFrozen): the
// sandbox is frozen at the point of the save, its files are copied while frozen, and
// it runs on. The image then starts other sandboxes from that point: a fork (a clone
// of a running sandbox, or a fork of a snapshot taken with its memory) restores it
// into the new sandbox's own container, with its own name, id, session credential
// file, network and egress policy.
//
// On disk, beside a sandbox's suspend image (memory.go):
//
//	memory/<snapshot id>/   a snapshot's memory image; its files' checksums are in
//	                        the snapshot's manifest, checked before every use
//
// A memory image never holds a secret's value: a sandbox with a secret delivered by
// value (file or env) has its memory snapshot refused, with that reason, and its forks
// keep files only, saying why (memoryUnsafe).

// memoryRefused is why sb's memory cannot be saved while it runs ("": it can).
func (m *Manager) memoryRefused(ctx context.Context, sb *store.Sandbox) string {
	if _, ok := m.checkpointer(sb); !ok {
		return fmt.Sprintf("its runtime (%s) cannot save a sandbox's memory; only runsc can (runc keeps files only)", runtimeName(sb))
	}
	if sb.State != Running {
		return fmt.Sprintf("it is %s; memory is saved from a running sandbox", sb.State)
	}
	if len(sb.Volumes) > 0 {
		return "volumes are attached to it, and a fork gets none of them: its processes would find the files they opened gone"
	}
	if why := m.memoryUnsafe(ctx, sb); why != "" {
		return why
	}
	return m.memoryRoom(sb) // memory.go
}

func runtimeName(sb *store.Sandbox) string {
	if sb.Runtime == "" {
		return "runc"
	}
	return sb.Runtime
}

// saveMemoryFrozen saves running sb's memory into the image of snapshot snapID and
// leaves sb frozen: thaw lets it run on once its files are copied. It is refused, with
// the reason, where the memory cannot be kept.
func (m *Manager) saveMemoryFrozen(ctx context.Context, sb *store.Sandbox, snapID string) (thaw func(), _ *snapshot.MemoryImage, _ error) {
	if why := m.memoryRefused(ctx, sb); why != "" {
		return nil, nil, errdefs.Precondition("sandbox %q's memory cannot be snapshotted: %s", sb.Name, why).
			WithDetails(map[string]any{"reason": "memory_not_kept", "why": why})
	}
	thaw, err := m.checkpointFrozen(ctx, sb, m.memoryDir(snapID))
	if err != nil {
		return nil, nil, errdefs.Unavailable("sandbox %q's memory could not be saved: %s", sb.Name, memoryFailure(err)).WithCause(err)
	}
	mi, err := memoryImageOf(m.memoryDir(snapID))
	if err != nil {
		thaw()
		m.dropSnapshotMemory(snapID)
		return nil, nil, err
	}
	return thaw, mi, nil
}

// checkpointFrozen saves running sb's memory into dir (made anew) and leaves it frozen
// until thaw. On error nothing is left in dir and sb runs on.
func (m *Manager) checkpointFrozen(ctx context.Context, sb *store.Sandbox, dir string) (thaw func(), _ error) {
	cp, ok := m.checkpointer(sb)
	fz, frozen := cp.(runtime.Freezer)
	if !ok || !frozen {
		return nil, errors.New("this runtime cannot save memory")
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	if err := cp.CheckpointFrozen(ctx, sb.ID, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return func() {
		if err := fz.Thaw(context.WithoutCancel(ctx), sb.ID); err != nil {
			m.log.Warn("thaw after a memory save", "sandbox", sb.ID, "err", err)
		}
	}, nil
}

// memoryImageOf names the files of the image at dir with their checksums.
func memoryImageOf(dir string) (*snapshot.MemoryImage, error) {
	mi := &snapshot.MemoryImage{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		sum, size, err := fileSum(path)
		if err != nil {
			return err
		}
		mi.Bytes += onDisk(d)
		rel, _ := filepath.Rel(dir, path)
		mi.Files = append(mi.Files, snapshot.MemoryFile{Name: rel, Size: size, SHA256: sum})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the memory image: %w", err)
	}
	return mi, nil
}

func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// verifySnapshotMemory checks a snapshot's memory image against its manifest: every
// file there, of its size and checksum, and no other.
func (m *Manager) verifySnapshotMemory(man *snapshot.Manifest) error {
	if man.Memory == nil {
		return nil
	}
	dir := m.memoryDir(man.ID)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("snapshot %s's memory image is not on this node: %w", man.ID, err)
	}
	got, err := memoryImageOf(dir)
	if err != nil {
		return fmt.Errorf("%w: snapshot %s: %w", snapshot.ErrCorrupt, man.ID, err)
	}
	want := map[string]snapshot.MemoryFile{}
	for _, f := range man.Memory.Files {
		want[f.Name] = f
	}
	if len(got.Files) != len(want) {
		return fmt.Errorf("%w: snapshot %s's memory image has %d files, its manifest names %d", snapshot.ErrCorrupt, man.ID, len(got.Files), len(want))
	}
	for _, f := range got.Files {
		if w, ok := want[f.Name]; !ok || w != f {
			return fmt.Errorf("%w: snapshot %s's memory image file %s does not match its checksum", snapshot.ErrCorrupt, man.ID, f.Name)
		}
	}
	return nil
}

// linkSnapshotMemory gives sandbox sb a copy of a snapshot's memory image to restore
// from (hard links: the restore only reads it, and removes its own copy after) and
// records it as sb's kept memory; its caller starts sb.
func (m *Manager) linkSnapshotMemory(sb *store.Sandbox, man *snapshot.Manifest) (retErr error) {
	src, dst := m.memoryDir(man.ID), m.memoryDir(sb.ID)
	os.RemoveAll(dst)
	defer func() {
		if retErr != nil {
			os.RemoveAll(dst)
		}
	}()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, f := range man.Memory.Files {
		if !filepath.IsLocal(f.Name) {
			return fmt.Errorf("%w: snapshot %s's memory image names %q, outside the image", snapshot.ErrCorrupt, man.ID, f.Name)
		}
		if strings.Contains(f.Name, "/") {
			if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f.Name)), 0o700); err != nil {
				return err
			}
		}
		if err := os.Link(filepath.Join(src, f.Name), filepath.Join(dst, f.Name)); err != nil {
			return err
		}
	}
	setMemory(sb, &MemoryState{Kept: true, Generation: sb.Generation, Bytes: man.Memory.Bytes, At: man.Created})
	return nil
}

// restoreSnapshotMemory gives suspended sb, whose files were just replaced by man's, the
// snapshot's memory image too when it has one (verified by the caller), so its resume runs its processes on from
// the snapshot's point; where that cannot be, an event says the memory was not kept.
// The record is stored by the caller.
func (m *Manager) restoreSnapshotMemory(sb *store.Sandbox, man *snapshot.Manifest) {
	if man.Memory == nil {
		return
	}
	why := ""
	if _, ok := m.checkpointer(sb); !ok {
		why = fmt.Sprintf("its runtime (%s) cannot restore memory; its files are the snapshot's", runtimeName(sb))
	} else if len(sb.Volumes) > 0 {
		// A memory snapshot is of a sandbox without volumes (memoryRefused).
		why = "volumes are attached to it: the snapshot's processes would find mounts they were not saved with; its files are the snapshot's"
	} else if err := m.linkSnapshotMemory(sb, man); err != nil {
		why = memoryFailure(err)
	}
	if why != "" {
		m.event(sb, "memory_not_kept", "restore", map[string]string{"reason": why})
	}
}

// dropSnapshotMemory removes a snapshot's memory image.
func (m *Manager) dropSnapshotMemory(id string) {
	if dir := m.memoryDir(id); dir != "" && strings.HasPrefix(id, "snap_") {
		os.RemoveAll(dir)
	}
}

// recoverSnapshotMemory removes the memory images no snapshot of this node names (a
// snapshot a crash interrupted, or deleted while the daemon was down). It asks only
// this node's snapshots: a manifest the object store has names no memory image here
// (snapshot.Store.Get), and start-up waits on no bucket.
func (m *Manager) recoverSnapshotMemory() {
	if m.snaps == nil || m.cfg.StateDir == "" {
		return
	}
	entries, _ := os.ReadDir(filepath.Join(m.cfg.StateDir, "memory"))
	if len(entries) == 0 {
		return
	}
	heads, _ := m.snaps.List("")
	named := make(map[string]bool, len(heads))
	for _, h := range heads {
		named[h.ID] = h.Memory != nil
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "snap_") && !named[e.Name()] {
			m.dropSnapshotMemory(e.Name())
		}
	}
}
