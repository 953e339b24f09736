package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/units"
)

// Suspend that keeps memory. Under a runtime that can save a container's memory and
// processes (runtime.Checkpointer: runsc), a suspend saves them into an image on the
// node, beside the kept upper layer, and the next resume restores them as they were.
// Otherwise, or when the save fails, the suspend keeps the files only, and says why in
// an event.
//
// On disk, under the node's state directory:
//
//	memory/<sandbox id>/          the image of a suspended sandbox, complete
//	memory/<sandbox id>.saving/   an image being written (gone once complete)
//
// The record says which: its Extra's "memory" (MemoryState) is written only once the
// image is complete and renamed in place, and cleared before the image is taken to
// restore from. A daemon killed in between leaves either a complete image and a record
// that says so, or a record that says nothing and an image recovery removes: the sandbox
// is suspended with memory or without, never half (recover.go).
//
// An image is valid only over the very upper layer it was saved with: anything that
// changes the layer of a suspended sandbox (a restore from a snapshot, a move to
// another node) drops the image first.

// MemoryState is what a suspended sandbox's record says about its memory.
type MemoryState struct {
	// Kept says the sandbox's processes and memory were saved at its suspend, and its
	// next resume restores them.
	Kept bool `json:"kept"`
	// Generation is the sandbox's generation when it was saved.
	Generation int64 `json:"generation,omitempty"`
	// Bytes is the image's size on disk.
	Bytes int64     `json:"bytes,omitempty"`
	At    time.Time `json:"at,omitzero"`
}

// sandboxExtra is the part of a sandbox record's Extra this file owns; other keys are
// kept as they are.
const memoryKey = "memory"

// MemoryOf returns what sb's record says of its memory (Kept false when nothing).
func MemoryOf(sb *store.Sandbox) MemoryState {
	var ms MemoryState
	if len(sb.Extra) == 0 {
		return ms
	}
	var extra map[string]json.RawMessage
	if json.Unmarshal(sb.Extra, &extra) != nil || extra[memoryKey] == nil {
		return ms
	}
	json.Unmarshal(extra[memoryKey], &ms)
	return ms
}

// setMemory sets (or with nil, clears) what sb's record says of its memory, in sb only;
// the caller stores it.
func setMemory(sb *store.Sandbox, ms *MemoryState) {
	extra := map[string]json.RawMessage{}
	if len(sb.Extra) > 0 {
		json.Unmarshal(sb.Extra, &extra)
	}
	if ms == nil {
		delete(extra, memoryKey)
	} else {
		extra[memoryKey], _ = json.Marshal(ms)
	}
	if len(extra) == 0 {
		sb.Extra = nil
		return
	}
	sb.Extra, _ = json.Marshal(extra)
}

// memoryDir is where sandbox id's memory image is kept ("": this node keeps none).
func (m *Manager) memoryDir(id string) string {
	if m.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(m.cfg.StateDir, "memory", id)
}

// RuntimeKeepsMemory says whether a suspend under the named runtime keeps processes
// and memory: runsc saves them (its checkpoint and restore); runc would need CRIU,
// which Airlock does not use (on the development hosts' kernel its checkpoint of a
// sandbox fails), so a runc sandbox's suspend keeps its files only.
func RuntimeKeepsMemory(runtime string) bool { return runtime == "runsc" }

// checkpointer returns sb's driver as a runtime.Checkpointer if its containers can be
// saved with their memory on this node.
func (m *Manager) checkpointer(sb *store.Sandbox) (runtime.Checkpointer, bool) {
	cp, ok := m.driver(sb).(runtime.Checkpointer)
	if !ok || !cp.Checkpoints() || m.memoryDir(sb.ID) == "" {
		return nil, false
	}
	return cp, true
}

// KeepsMemory says whether a suspend of sb keeps its memory (its runtime can save it).
func (m *Manager) KeepsMemory(sb *store.Sandbox) bool {
	_, ok := m.checkpointer(sb)
	return ok
}

// stopKeepingMemory stops sb's container for a suspend: with its memory saved when its
// runtime can, else (or when the save fails) keeping its files only. It records the
// outcome in sb (stored by the caller with the suspended state) and in an event.
func (m *Manager) stopKeepingMemory(ctx context.Context, sb *store.Sandbox, cause string) error {
	cp, ok := m.checkpointer(sb)
	if !ok {
		setMemory(sb, nil)
		return m.driver(sb).Stop(ctx, sb.ID)
	}
	dir := m.memoryDir(sb.ID)
	saving := dir + ".saving"
	if cause == "recover" {
		// A save that completed before a restart, whose record was not written yet:
		// its container is gone and its image complete.
		if st, err := m.driver(sb).Status(ctx, sb.ID); err == nil && st == runtime.StatusAbsent {
			if _, err := os.Stat(dir); err == nil {
				return m.keptMemory(sb, dir, cause)
			}
		}
	}
	if why := m.memoryUnsafe(ctx, sb); why != "" {
		return m.stopLosingMemory(ctx, sb, cause, errors.New(why))
	}
	if why := m.memoryRoom(sb); why != "" {
		return m.stopLosingMemory(ctx, sb, cause, errors.New(why))
	}
	// What an earlier suspend left: an image the record no longer names, a part-written
	// one.
	m.dropMemory(sb)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return m.stopLosingMemory(ctx, sb, cause, err)
	}
	failpoint.Hit("sandbox.checkpoint-begin")
	if err := cp.Checkpoint(ctx, sb.ID, saving); err != nil {
		os.RemoveAll(saving)
		return m.stopLosingMemory(ctx, sb, cause, err)
	}
	failpoint.Hit("sandbox.checkpoint-saved")
	if err := os.Rename(saving, dir); err != nil {
		os.RemoveAll(saving)
		return m.stopLosingMemory(ctx, sb, cause, err)
	}
	syncDir(filepath.Dir(dir))
	return m.keptMemory(sb, dir, cause)
}

// keptMemory records in sb (stored by the caller) and in an event that its memory is
// kept in the image at dir.
func (m *Manager) keptMemory(sb *store.Sandbox, dir, cause string) error {
	ms := MemoryState{Kept: true, Generation: sb.Generation, Bytes: diskBytes(dir), At: m.now()}
	setMemory(sb, &ms)
	m.event(sb, "memory_kept", cause, map[string]any{"bytes": ms.Bytes})
	return nil
}

// memoryUnsafe says why sb's memory must not be written to disk ("": it may): a secret
// delivered by value (file or env) may be in its processes' memory, and a memory image
// never holds a secret's value. Placeholders (proxy deliveries) are safe.
func (m *Manager) memoryUnsafe(ctx context.Context, sb *store.Sandbox) string {
	if len(sb.Volumes) > 0 {
		// The runtime's cache of a volume's files would be kept in the image, outside
		// the volume's encryption.
		return "volumes are attached to it, whose files its memory may hold outside their encryption"
	}
	if m.delivery == nil {
		return ""
	}
	values, err := m.delivery.DeliversValues(ctx, sb.Owner, sb.ID)
	if err != nil {
		return "its secret bindings could not be read: " + err.Error()
	}
	if values {
		return "a secret is delivered to it by value (file or env), which its memory may hold; only proxy deliveries let a suspend keep memory"
	}
	return ""
}

// memoryRoom says why sb's memory image may not be written to the state disk now ("":
// it may): an image takes up to the sandbox's memory, and after it the disk must keep
// its floor (Config.MinFreeStateDisk) free, without which no sandbox of any owner
// starts (statedisk.go).
func (m *Manager) memoryRoom(sb *store.Sandbox) string {
	if m.cfg.StateDir == "" || m.cfg.MinFreeStateDisk <= 0 {
		return ""
	}
	free, _, err := m.stateDiskFree()
	if err != nil {
		return "the room on the node's disk cannot be read: " + err.Error()
	}
	if need := max(sb.Limits.Memory, 0) + m.cfg.MinFreeStateDisk; free < need {
		return fmt.Sprintf("the node's disk has %s free: a memory image may take the sandbox's memory (%s), and %s must stay free",
			units.FormatSize(free), units.FormatSize(max(sb.Limits.Memory, 0)), units.FormatSize(m.cfg.MinFreeStateDisk))
	}
	return ""
}

// stopLosingMemory is the files-only fallback of a suspend whose memory could not be
// saved: the event says why.
func (m *Manager) stopLosingMemory(ctx context.Context, sb *store.Sandbox, cause string, why error) error {
	m.log.Warn("suspend keeps files only: memory not saved", "sandbox", sb.ID, "err", why)
	m.event(sb, "memory_not_kept", cause, map[string]string{"reason": memoryFailure(why)})
	setMemory(sb, nil)
	return m.driver(sb).Stop(ctx, sb.ID)
}

// memoryFailure says in a line why a memory image could not be written or read.
func memoryFailure(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), strings.Contains(err.Error(), syscall.ENOSPC.Error()): // the engine's own
		return "the node's disk is full: " + err.Error()
	case errors.Is(err, fs.ErrNotExist):
		return "the memory image is gone: " + err.Error()
	}
	msg, _, _ := strings.Cut(err.Error(), "\n") // not an engine's stack trace
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return msg
}

// startFromMemory starts sb's container, restoring its processes from its memory image
// when its record says it has one; a restore that fails falls back to a fresh start
// (files only) and says why in an event. The image is dropped from the record (stored
// by the caller with the running state) and from disk either way: once the sandbox
// runs, its layer moves on and the image no longer matches it. A restore that fails
// returns errRestoreFailed, and the caller starts the sandbox afresh.
func (m *Manager) startFromMemory(ctx context.Context, sb *store.Sandbox, spec runtime.Spec) error {
	ms := MemoryOf(sb)
	cp, ok := m.checkpointer(sb)
	if !ms.Kept || !ok {
		if ms.Kept {
			m.event(sb, "memory_not_restored", "resume", map[string]string{"reason": "this node's runtime cannot restore memory"})
		}
		m.dropMemory(sb)
		return m.driver(sb).Start(ctx, spec)
	}
	dir := m.memoryDir(sb.ID)
	// The record forgets the image before the restore runs processes that change the
	// layer: a crash from here on leaves a sandbox suspended without memory.
	setMemory(sb, nil)
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		setMemory(sb, &ms)
		return err
	}
	err := cp.Restore(ctx, spec, dir)
	if err == nil {
		failpoint.Hit("sandbox.restore-done")
		m.removeRestored(dir)
		m.event(sb, "memory_restored", "resume", map[string]any{"saved_generation": ms.Generation})
		return nil
	}
	m.log.Warn("resume starts afresh: memory not restored", "sandbox", sb.ID, "err", err)
	m.event(sb, "memory_not_restored", "resume", map[string]string{"reason": memoryFailure(err)})
	os.RemoveAll(dir)
	return fmt.Errorf("%w: %w", errRestoreFailed, err)
}

// removeRestored removes a memory image the sandbox was restored from. Its removal
// (tens of megabytes of pages) is no part of the resume: the image is renamed aside at
// once, so no later suspend can write where it is, and removed in the background. A
// crash before that leaves dir+restoredSuffix, which the sandbox's next suspend or
// its removal takes away.
func (m *Manager) removeRestored(dir string) {
	aside := dir + restoredSuffix
	if err := os.Rename(dir, aside); err != nil {
		os.RemoveAll(dir) // an earlier one still being removed: remove this one now
		return
	}
	go os.RemoveAll(aside)
}

// restoredSuffix names a restored memory image set aside for removal.
const restoredSuffix = ".restored"

// errRestoreFailed is startFromMemory's error when the restore failed and left no
// container: the caller starts the sandbox afresh, with a network made anew (the
// engine may have taken the old one's addresses for its own stack).
var errRestoreFailed = errors.New("memory not restored")

// dropMemory forgets sb's memory image, in sb (stored by the caller) and on disk.
func (m *Manager) dropMemory(sb *store.Sandbox) {
	setMemory(sb, nil)
	if dir := m.memoryDir(sb.ID); dir != "" {
		os.RemoveAll(dir)
		os.RemoveAll(dir + ".saving")
		os.RemoveAll(dir + restoredSuffix)
	}
}

// forgetMemory drops a suspended sandbox's memory image before something changes its
// files (the image would no longer match them), and records that and why.
func (m *Manager) forgetMemory(ctx context.Context, sb *store.Sandbox, cause, why string) error {
	if !MemoryOf(sb).Kept {
		return nil
	}
	dropped, undo := m.unkeepMemory(sb, cause, why)
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		undo()
		return err
	}
	dropped()
	return nil
}

// unkeepMemory clears a suspended sandbox's memory entry in sb, for a change the caller
// stores next with it (its mounts, its files): once stored, dropped removes the image
// and records why; if the store fails, undo puts the entry back. Both do nothing when
// no memory is kept.
func (m *Manager) unkeepMemory(sb *store.Sandbox, cause, why string) (dropped, undo func()) {
	ms := MemoryOf(sb)
	if !ms.Kept {
		return func() {}, func() {}
	}
	setMemory(sb, nil)
	dropped = func() {
		m.dropMemory(sb)
		m.event(sb, "memory_not_kept", cause, map[string]string{"reason": why})
	}
	return dropped, func() { setMemory(sb, &ms) }
}

// recoverMemory makes a sandbox's memory image agree with its record after a restart:
// an image the record does not name (a save or a restore a crash interrupted) is
// removed, and a record whose image is gone says so.
func (m *Manager) recoverMemory(ctx context.Context, sb *store.Sandbox) {
	dir := m.memoryDir(sb.ID)
	if dir == "" {
		return
	}
	os.RemoveAll(dir + ".saving")
	ms := MemoryOf(sb)
	if ms.Kept && sb.State == Suspended {
		if _, err := os.Stat(dir); err == nil {
			return
		}
		m.event(sb, "memory_not_kept", "recover", map[string]string{"reason": "the memory image is gone from this node"})
	} else if _, err := os.Stat(dir); err == nil && sb.State == Suspended {
		m.event(sb, "memory_not_kept", "recover", map[string]string{"reason": "a daemon restart interrupted the save or restore of its memory"})
	}
	os.RemoveAll(dir)
	if ms.Kept {
		setMemory(sb, nil)
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			m.log.Warn("record a lost memory image", "sandbox", sb.ID, "err", err)
		}
	}
}

// diskBytes is the space the files under dir take on disk.
func diskBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n += onDisk(d)
		}
		return nil
	})
	return n
}

// onDisk is the space the file d takes on disk (0 if it cannot be read).
func onDisk(d fs.DirEntry) int64 {
	if fi, err := d.Info(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return st.Blocks * 512
		}
	}
	return 0
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
