package oci

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCapLogRotatesInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, agentLogName)
	// The container's descriptor: it keeps appending to the same file after a rotation.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(bytes.Repeat([]byte("a"), 3000))
	f.Write([]byte("TAIL"))
	capLog(dir, 1000)
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("log past the cap is %d bytes after a sweep; want emptied", fi.Size())
	}
	old, _ := os.ReadFile(filepath.Join(dir, agentLogOldName))
	if len(old) != 1000 || !bytes.HasSuffix(old, []byte("TAIL")) {
		t.Fatalf("rotated log holds %d bytes ending %q; want the last 1000 bytes", len(old), old[max(len(old)-4, 0):])
	}
	f.Write([]byte("next"))
	if got := logTail(dir, 100); string(got) != "next" {
		t.Fatalf("after rotation the writer's next line = %q; want it at the start of the log", got)
	}
	capLog(dir, 1000) // under the cap: untouched
	if got := logTail(dir, 100); string(got) != "next" {
		t.Fatalf("a log under the cap was changed: %q", got)
	}
}
