package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

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
