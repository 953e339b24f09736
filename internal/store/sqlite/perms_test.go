package sqlite

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFilesAreOwnerOnly checks that the database and its -wal and -shm are 0600 even when
// made under a permissive umask, or found with looser modes.
func TestFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil { // found world-readable
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("stat %s: %v", filepath.Base(p), err)
			continue
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s has mode %v; want 0600", filepath.Base(p), got)
		}
	}
}
