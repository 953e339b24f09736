package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesAConfigOthersCanChange: the configuration says who administers the
// node and what runs as root, so a file another user owns or may write is refused
// before anything starts.
func TestServeRefusesAConfigOthersCanChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	// Nothing may start: the state directory and socket are paths that must not appear.
	// The file is invalid too (live_cap: 0), so that a serve that read it anyway would
	// stop at its validation rather than start a daemon.
	cfg := "state_dir: " + filepath.Join(dir, "state") + "\nsocket: " + filepath.Join(dir, "api.sock") + "\nsecrets_dir: " + filepath.Join(dir, "secrets") +
		"\nunix_users: {65534: local}\ncgroup_parent: airlock-rev2\nnetwork: {enabled: false}\nlive_cap: 0\n"
	for _, tc := range []struct {
		name      string
		mode      os.FileMode
		uid, gid  int
		wantError string
	}{
		{"world-writable", 0o666, 0, 0, "may write"},
		{"group-writable", 0o660, 0, 65534, "may write"},
		{"another user's", 0o600, 65534, 65534, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, tc.mode)
			if err := os.Chown(path, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			err := serve(context.Background(), []string{"--config", path})
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("serve --config %s: %v; want %q", tc.name, err, tc.wantError)
			}
			for _, p := range []string{"state", "secrets", "api.sock"} {
				if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s was made", p)
				}
			}
		})
	}
}
