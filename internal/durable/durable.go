// Package durable holds how Airlock makes a change to the file system survive a crash:
// a small file replaced whole (WriteFile) and a directory's entries synced (SyncDir).
//
// It guards no hostile surface itself: its callers write only files whose paths they
// chose.
package durable

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm: a temp file beside it, written and
// synced, renamed over path, and the directory synced. A reader sees the old file or the
// new one, never part of one, and after a crash one of the two is there.
func WriteFile(path string, data []byte, perm os.FileMode) error {
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

// EnsureFile is WriteFile unless path already holds data (and is no larger), in which
// case it writes nothing: a daemon restarted on a full disk must not fail for a file it
// need not change.
func EnsureFile(path string, data []byte, perm os.FileMode) error {
	if f, err := os.Open(path); err == nil {
		old := make([]byte, len(data)+1)
		n, _ := io.ReadFull(f, old)
		f.Close()
		if n == len(data) && bytes.Equal(old[:n], data) {
			return nil
		}
	}
	return WriteFile(path, data, perm)
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

// ReplaceDir puts a new directory in place of dir: the old one is set aside (dir.old),
// fill makes the new one at dir, and the old one is removed once fill succeeds; if it
// fails, whatever it made is removed and the old one is put back.
func ReplaceDir(dir string, fill func(dir string) error) error {
	old := dir + ".old"
	os.RemoveAll(old)
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := fill(dir); err != nil {
		os.RemoveAll(dir)
		os.Rename(old, dir)
		return err
	}
	return os.RemoveAll(old)
}
