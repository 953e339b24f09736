package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The state directory holds the database (with exposed ports' tokens), the node CA's
// key, images, snapshots and every sandbox's storage. Nothing in it is for other host
// users. Sandboxes, though, run as unprivileged host uids that must reach a few paths in
// it (their root, their client files, the agent binary), so those directories stay
// searchable by others (0711, never listable), and everything else is 0700 or 0600.
//
// stateUmask is the daemon's umask: no file it makes is readable or writable by group
// or others unless it sets that mode on purpose (the CA bundle sandboxes read); search
// permission survives, so a directory made 0711 for sandboxes to pass through stays so.
const stateUmask = 0o066

// traversed are the state directory's entries that sandboxes' uids pass through to their
// own paths: searchable by others, not listable. What is inside those marked false is
// left as its owner made it: the runtime driver (each sandbox's directory, runc's state),
// the network (each sandbox's client files, in a directory owned by the sandbox's uid)
// and the kernel (network namespace files, whose mode is nsfs's).
var traversed = map[string]bool{
	"bin":               true, // the agent binary, bound into every sandbox
	"sandboxes":         false,
	"sandboxes-runsc":   false, // gVisor's gofer opens each root as the sandbox's uid
	"runc":              false,
	"network":           true,
	"network/sandboxes": false, // each sandbox's tmpfs of client files, before network/files
	"network/files":     false, // the tmpfs of sandboxes' client files, a directory each
	"network/netns":     false,
	"workspaces":        false, // a 0700 directory of root's per sandbox, its workspace mounted at mnt
	// The read-only views sandboxes bind the agent binary and the CA bundle from
	// (bindsource.View): overlay mounts, left as they are.
	"sandboxes-agent":       false,
	"sandboxes-runsc-agent": false,
	"network/ca-view":       false,
	"network/ca-public":     true, // the CA bundle's view shows this directory
}

// shared are files every sandbox reads, so others may read them too; they hold nothing
// secret.
var shared = map[string]os.FileMode{
	"bin/airlock":                     0o755, // the public binary; gVisor's kernel reads it to load it
	"network/ca-bundle.pem":           0o644, // public CA certificates
	"network/ca-public/ca-bundle.pem": 0o644,
}

// secureStateDir sets the modes of the state directory and its daemon-owned entries, so
// that a directory made before these rules (or by hand, or under another umask) is no
// longer open to other host users. Entries owned by a sandbox's uid are the sandbox's
// own and are left alone; so is everything inside a directory others cannot search.
func secureStateDir(dir string) error {
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	var errs []error
	var walk func(rel string) // rel: an entry of a searchable directory
	walk = func(rel string) {
		p := filepath.Join(dir, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return
		}
		if st.Uid != 0 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return // a sandbox's own, or a link (its mode means nothing)
		}
		mode := os.FileMode(st.Mode & 0o7777)
		want := mode &^ 0o077
		switch {
		case shared[rel] != 0:
			want = shared[rel]
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			if _, ok := traversed[rel]; ok {
				want = mode&^0o077 | 0o011
			}
		}
		if want != mode {
			// Not a link (checked above), in a directory only root writes to.
			if err := os.Chmod(p, want); err != nil {
				errs = append(errs, err)
			}
		}
		if descend, ok := traversed[rel]; !ok || !descend {
			return // others cannot pass, or its owner keeps what is inside
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, e := range entries {
			walk(filepath.Join(rel, e.Name()))
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		walk(e.Name())
	}
	return errors.Join(errs...)
}
