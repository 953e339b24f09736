// Package dirtree describes a local directory tree for tests that compare trees: each
// path with its type, mode and contents or link target. It is test support only and
// imports nothing of Airlock.
package dirtree

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Describe lists what is under dir (dir itself excluded), keyed by relative path.
func Describe(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Diff reports, as test errors, every path whose description differs between want
// and got, or that only one has.
func Diff(t testing.TB, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: got %q; want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%q: present, but not wanted", k)
		}
	}
}
