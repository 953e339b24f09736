package network

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/bindsource"
)

// The files a sandbox binds read-only (resolv.conf, its session token, the clients'
// proxy settings) are in a directory of its own on one tmpfs of the node's, filesDir,
// named by a keyed hash of its id (bindsource.Names): its mount table shows them as
// /HASH/NAME, which says nothing of the host or of the sandbox. One tmpfs for all, not
// one a sandbox: every container start reads and copies the host's whole mount table,
// so each mount a running sandbox keeps slows every later start. The tmpfs outlives the
// daemon while any sandbox has files on it (a restarted daemon rewrites a running
// sandbox's files in place, which its binds hold); a daemon that stops with none left
// unmounts it.
//
// Only the daemon writes there, a few small files a sandbox, so the size bounds the
// daemon's own writes: at most 6 one-page files and a directory for each of up to
// 16,384 sandboxes (the uid ranges a node hands out).
const (
	filesDir  = "files"
	filesOpts = "mode=0711,size=512m,nr_inodes=131072"
)

// legacyFilesDir is where a daemon before the shared tmpfs mounted a small tmpfs of
// each sandbox's own, network/sandboxes/ID: a sandbox it started and that still runs
// keeps binding those files.
func (n *Node) legacyFilesDir(id string) string { return filepath.Join(n.opts.Dir, "sandboxes", id) }

// openFiles mounts the files tmpfs at dir (keeping one already there, with the files
// of the sandboxes that still run) and reads or makes its key of names.
func openFiles(dir string) (*bindsource.Names, error) {
	if err := bindsource.Tmpfs(dir, filesOpts); err != nil {
		return nil, err
	}
	return bindsource.OpenNames(dir)
}

// closeFiles unmounts the files tmpfs at dir if no sandbox has a directory on it.
func closeFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return nil // a sandbox's: kept for the daemon's next start
		}
	}
	if err := bindsource.Unmount(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// FilesDir is the directory sandbox id's bound files are in (made or not).
func (n *Node) FilesDir(id string) string {
	if legacy := n.legacyFilesDir(id); isTmpfs(legacy) {
		return legacy
	}
	return filepath.Join(n.opts.Dir, filesDir, n.files.Name(id))
}

// removeFiles removes sandbox id's files, wherever a daemon put them.
func (n *Node) removeFiles(id string) error {
	legacy := n.legacyFilesDir(id)
	if err := bindsource.Unmount(legacy); err != nil {
		return err // never remove through a mount
	}
	return errors.Join(os.RemoveAll(legacy), os.RemoveAll(filepath.Join(n.opts.Dir, filesDir, n.files.Name(id))))
}

func isTmpfs(dir string) bool {
	ok, err := bindsource.IsTmpfs(dir)
	return err == nil && ok
}
