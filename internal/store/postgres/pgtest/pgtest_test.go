package pgtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSweep: Start removes the directory of a server whose test process is gone (its
// lock file unheld), and keeps one whose process lives or that is still being made.
func TestSweep(t *testing.T) {
	dead, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dead)
	if err := os.WriteFile(filepath.Join(dead, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	f, err := lockDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	making, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(making)

	sweep()
	for _, c := range []struct {
		dir  string
		kept bool
	}{{dead, false}, {live, true}, {making, true}} {
		if _, err := os.Stat(c.dir); (err == nil) != c.kept {
			t.Errorf("after sweep, %s: stat error %v; want it kept: %v", c.dir, err, c.kept)
		}
	}
}
