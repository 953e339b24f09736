package objstore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/durable"
)

// Dir is a Store in a local directory: one file per object, at its key's path. Keys
// are checked by ValidKey, so none leaves the directory.
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// OpenDir opens (making it if needed) the directory store at root.
func OpenDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &Dir{root: root}, nil
}

// Where implements Store.
func (d *Dir) Where() string { return "file://" + d.root }

func (d *Dir) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put implements Store: the content goes to a temporary file, is checked, synced and
// renamed into place.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, sum string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	c, err := newChecked(r, size, sum)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, c)
	if err == nil && c.n != size {
		err = errMismatch
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return durable.SyncDir(filepath.Dir(p))
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return f, err
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.path(key)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !st.Mode().IsRegular() {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: st.Size(), Modified: st.ModTime()}, nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List implements Store.
func (d *Dir) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	var infos []Info
	err := filepath.WalkDir(d.root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".tmp-") {
			return nil
		}
		rel, _ := filepath.Rel(d.root, p)
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := de.Info()
		if err != nil {
			return err
		}
		infos = append(infos, Info{Key: key, Size: st.Size(), Modified: st.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Key, b.Key) })
	for _, in := range infos {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}
