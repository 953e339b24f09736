// Package fsutil holds the one way Airlock replaces a small file durably.
//
// It guards no hostile surface itself: its callers write only files whose paths they
// chose.
package fsutil

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data, mode perm: a temp file beside it, written and
// synced, renamed over path, and the directory synced. A reader sees the old file or the
// new one, never part of one, and after a crash one of the two is there.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes a directory's entries (a rename, a new file) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
