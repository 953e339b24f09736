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
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
)

// A sandbox record's memory entry is set and cleared in its Extra without touching the
// other keys there, and reads back as it was written.
func TestMemoryRecord(t *testing.T) {
	sb := &store.Sandbox{Extra: json.RawMessage(`{"note":"hello"}`)}
	if ms := MemoryOf(sb); ms.Kept {
		t.Fatalf("a record without a memory entry reads %+v; want not kept", ms)
	}
	setMemory(sb, &MemoryState{Kept: true, Generation: 3, Bytes: 4096})
	if ms := MemoryOf(sb); !ms.Kept || ms.Generation != 3 || ms.Bytes != 4096 {
		t.Errorf("after setMemory: %+v; want kept at generation 3, 4096 bytes", ms)
	}
	setMemory(sb, nil)
	if got := string(sb.Extra); got != `{"note":"hello"}` {
		t.Errorf("after clearing: Extra = %s; want the other keys only", got)
	}
	setMemory(&store.Sandbox{}, nil) // no Extra: nothing to clear, no panic
	if ms := MemoryOf(&store.Sandbox{Extra: json.RawMessage(`not json`)}); ms.Kept {
		t.Errorf("a damaged Extra reads %+v; want not kept", ms)
	}
}

// Why a save failed reads in one bounded line: a full disk is named as such, and an
// engine's stack trace is cut.
func TestMemoryFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("write: %w", syscall.ENOSPC), "the node's disk is full"},
		{errors.New("runsc checkpoint: closing state file failed: no space left on device"), "the node's disk is full"},
		{errors.New("encoding error: host.inode is not savable:\ngoroutine 667 [running]:\n..."), "encoding error: host.inode is not savable:"},
	} {
		got := memoryFailure(c.err)
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "\n") {
			t.Errorf("memoryFailure(%q) = %q; want it to start %q, on one line", c.err, got, c.want)
		}
	}
	if got := memoryFailure(errors.New(strings.Repeat("x", 5000))); len(got) > 520 {
		t.Errorf("a long error gives %d bytes; want at most ~512", len(got))
	}
}

// saver is the fake driver with a memory save that writes an image of a few bytes.
type saver struct{ *fake.Driver }

func (saver) Checkpoints() bool { return true }
func (s saver) Checkpoint(ctx context.Context, id, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("pages"), 0o600); err != nil {
		return err
	}
	return s.Stop(ctx, id)
}
func (saver) Restore(context.Context, runtime.Spec, string) error { return errors.New("not restored") }
func (saver) CheckpointFrozen(context.Context, string, string) error {
	return errors.New("not saved")
}

// A memory image takes up to the sandbox's memory on the state disk: a suspend keeps
// memory only where that leaves the disk's floor free for every sandbox's start, and
// otherwise keeps files only, saying why.
func TestSuspendKeepsMemoryOnlyWithRoomForIt(t *testing.T) {
	for _, c := range []struct {
		name    string
		floor   int64
		volumes bool
		kept    bool
	}{
		{"room", 1, false, true},
		{"no room", 1 << 62, false, false},
		{"volumes attached", 1, true, false}, // their files would be kept outside their encryption
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.StateDir = t.TempDir()
			m, st := newManagerWith(t, cfg, saver{newFake(t)})
			ctx := context.Background()
			_, sb, err := m.Create(ctx, local, CreateRequest{Name: "box"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Terminate(ctx, local, sb.ID)
			m.cfg.MinFreeStateDisk = c.floor // after the create, which checks it too
			if c.volumes {
				rec, err := st.GetSandbox(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				rec.Volumes = []store.SandboxVolume{{VolumeID: "vol_x", Name: "data", Path: "/data"}}
				if err := st.UpdateSandbox(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := m.Suspend(ctx, local, sb.ID); err != nil {
				t.Fatal(err)
			}
			cur, err := st.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if MemoryOf(cur).Kept != c.kept {
				t.Errorf("memory kept %v with a floor of %d bytes; want %v", MemoryOf(cur).Kept, c.floor, c.kept)
			}
			if _, err := os.Stat(m.memoryDir(sb.ID)); (err == nil) != c.kept {
				t.Errorf("the memory image on disk: %v; want it there %v", err, c.kept)
			}
		})
	}
}

// restorer is saver whose restore starts the container as if from the image.
type restorer struct{ saver }

func (r restorer) Restore(ctx context.Context, s runtime.Spec, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "pages.img")); err != nil {
		return err
	}
	return r.Start(ctx, s)
}

// The image a sandbox was restored from is removed after the resume, and what a crash
// left of an earlier one set aside for removal goes at the next suspend.
func TestRestoredMemoryImageIsRemoved(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	m, st := newManagerWith(t, cfg, restorer{saver{newFake(t)}})
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Terminate(ctx, local, sb.ID)
	dir := m.memoryDir(sb.ID)
	left := dir + restoredSuffix // as a crash during its removal leaves it
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "pages.img"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Suspend(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a suspend, the image a crash left set aside: %v; want it removed", err)
	}
	if cur, err := st.GetSandbox(ctx, sb.ID); err != nil || !MemoryOf(cur).Kept {
		t.Fatalf("the suspend kept no memory: %v", err)
	}
	if _, _, err := m.Resume(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	if cur, err := st.GetSandbox(ctx, sb.ID); err != nil || cur.State != Running || MemoryOf(cur).Kept {
		t.Fatalf("after the resume: %+v, %v; want running, no memory kept", cur, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after the resume, the image: %v; want it gone", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist); _, err = os.Stat(left) {
		if time.Now().After(deadline) {
			t.Fatalf("the restored image set aside is still there: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
