package image

import (
	"os"
	"path/filepath"
	"testing"
)

// An image's user is looked up in its topmost layer that has the file, and a symlink
// in a layer never makes the lookup read the host's files.
func TestLookupImageUser(t *testing.T) {
	lower, upper, evil := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(lower, "etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:5:5::/home/app:/bin/sh\n")
	write(upper, "etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n")
	write(upper, "etc/group", "staff:x:50:\n")
	layers := []string{lower, upper}
	for _, c := range []struct {
		file, name      string
		gidField        int
		wantID, wantGID uint32
	}{
		{"etc/passwd", "app", 3, 1000, 1001}, // the upper layer's line wins
		{"etc/passwd", "1000", 3, 1000, 1001},
		{"etc/passwd", "4242", 3, 4242, 4242}, // a uid the image does not list
		{"etc/group", "staff", -1, 50, 50},
	} {
		id, gid, err := lookupID(layers, c.file, c.name, 2, c.gidField)
		if err != nil || id != c.wantID || gid != c.wantGID {
			t.Errorf("lookup %s in %s = %d:%d, %v; want %d:%d", c.name, c.file, id, gid, err, c.wantID, c.wantGID)
		}
	}
	if _, _, err := lookupID(layers, "etc/passwd", "nobody-here", 2, 3); err == nil {
		t.Error("an unknown user was found")
	}
	// A layer whose passwd is a symlink out of it: refused, not read.
	os.MkdirAll(filepath.Join(evil, "etc"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(evil, "etc/passwd"))
	if _, _, err := lookupID([]string{lower, evil}, "etc/passwd", "root", 2, 3); err == nil {
		t.Error("a symlink out of the layer was followed")
	}
}
