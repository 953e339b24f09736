package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	baseA uint32 = 100000
	baseB uint32 = 300000
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		const msg = "snapshot tests need root (chown, mknod, trusted xattrs)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// randBytes returns n pseudo-random bytes that differ by seed.
func randBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})
	r.Read(b)
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// put writes a file of the layer at dir, owned by container uid/gid id of the range at base.
func put(t testing.TB, dir, name string, body []byte, mode uint32, base, id uint32) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, body, 0o600))
	must(t, os.Lchown(p, int(base+id), int(base+id)))
	must(t, unix.Chmod(p, mode))
	return p
}

// newLayer makes an upper dir whose root belongs to base:base.
func newLayer(t testing.TB, base uint32) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "upper")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chown(dir, int(base), int(base)))
	return dir
}

// aclXattr is a POSIX ACL granting read to user uid.
func aclXattr(uid uint32) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 6, ^uint32(0)}, {2, 4, uid}, {4, 4, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 4, ^uint32(0)}} {
		b = le.AppendUint16(b, e.tag)
		b = le.AppendUint16(b, e.perm)
		b = le.AppendUint32(b, e.id)
	}
	return b
}

// capsXattrV3 is a file capability set (cap_net_bind_service) bound to root id rootid.
func capsXattrV3(rootid uint32) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0x03000000|1) // revision 3, effective
	b = le.AppendUint32(b, 1<<10)           // permitted: cap_net_bind_service
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	return le.AppendUint32(b, rootid)
}

// fullLayer makes an upper layer with every entry type the store keeps.
func fullLayer(t testing.TB, base uint32) string {
	t.Helper()
	dir := newLayer(t, base)
	put(t, dir, "etc/hostname", []byte("box\n"), 0o644, base, 0)
	put(t, dir, "home/user/empty", nil, 0o600, base, 1000)
	put(t, dir, "home/user/big.bin", randBytes(1, 2*ChunkSize+12345), 0o640, base, 1000)
	suid := put(t, dir, "usr/local/bin/tool", []byte("#!/bin/sh\n"), 0o4755, base, 0)
	must(t, unix.Setxattr(suid, capsXattr, capsXattrV3(base), 0))
	acl := put(t, dir, "home/user/shared", []byte("acl"), 0o640, base, 1000)
	must(t, unix.Setxattr(acl, aclAccess, aclXattr(base+1001), 0))
	must(t, unix.Setxattr(acl, "user.note", []byte("hello"), 0))

	sparse := put(t, dir, "var/lib/sparse.img", nil, 0o644, base, 0)
	f, err := os.OpenFile(sparse, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("tail"), 5*ChunkSize+10)
	must(t, err)
	must(t, f.Close())

	must(t, os.Link(filepath.Join(dir, "home/user/big.bin"), filepath.Join(dir, "home/user/big.link")))
	must(t, os.Link(filepath.Join(dir, "home/user/big.bin"), filepath.Join(dir, "etc/big.link2")))
	must(t, os.Symlink("/etc/hostname", filepath.Join(dir, "home/user/abs")))
	must(t, os.Symlink("../../nowhere", filepath.Join(dir, "home/user/dangling")))
	must(t, unix.Lchown(filepath.Join(dir, "home/user/abs"), int(base+1000), int(base+1000)))
	must(t, unix.Lsetxattr(filepath.Join(dir, "home/user/abs"), "trusted.mark", []byte("l"), 0))

	// Overlayfs makes whiteouts with the mounter's (host root's) ids.
	must(t, unix.Mknod(filepath.Join(dir, "etc/removed"), unix.S_IFCHR, 0))
	must(t, os.Mkdir(filepath.Join(dir, "opt"), 0o755))
	must(t, os.Chown(filepath.Join(dir, "opt"), int(base), int(base)))
	must(t, unix.Setxattr(filepath.Join(dir, "opt"), opaqueXattr, []byte("y"), 0))
	must(t, unix.Mkfifo(filepath.Join(dir, "home/user/pipe"), 0o620))
	must(t, os.Chown(filepath.Join(dir, "home/user/pipe"), int(base+1000), int(base+1000)))
	must(t, os.Mkdir(filepath.Join(dir, "tmpdir"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "tmpdir"), 0o1777|os.ModeSticky))
	must(t, os.MkdirAll(filepath.Join(dir, "srv/locked/deep"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "srv/locked"), 0o500))
	must(t, unix.Chmod(filepath.Join(dir, "srv"), 0o2750))
	// What MkdirAll and Symlink made belongs to host root; give it to the sandbox's root.
	must(t, filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		var st unix.Stat_t
		if err == nil {
			err = unix.Lstat(p, &st)
		}
		if err == nil && st.Uid == 0 && st.Mode&unix.S_IFMT != unix.S_IFCHR {
			err = unix.Lchown(p, int(base), int(base))
		}
		return err
	}))
	return dir
}

// describe renders every path below root with container-native ids (relative to base),
// content digests and, for hardlinks, the first path of the inode.
func describe(t testing.TB, root string, base uint32) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		whiteout := st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		native := func(id uint32) string {
			if whiteout && id == 0 {
				return "0" // host root's whiteouts come back as the sandbox root's
			}
			if id >= base && id-base < idRange {
				return fmt.Sprint(id - base)
			}
			return fmt.Sprintf("host:%d", id)
		}
		d := fmt.Sprintf("fmt=%o mode=%o owner=%s:%s mtime=%d", st.Mode&unix.S_IFMT, st.Mode&0o7777,
			native(st.Uid), native(st.Gid), st.Mtim.Nano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if first, ok := inodes[st.Ino]; ok && st.Nlink > 1 {
				d += " link=" + first
			} else {
				inodes[st.Ino] = rel
			}
			body, err := os.ReadFile(p)
			must(t, err)
			d += fmt.Sprintf(" size=%d sha=%x", len(body), sha256.Sum256(body))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			must(t, err)
			d += " target=" + target
		case unix.S_IFCHR:
			d += fmt.Sprintf(" rdev=%d", st.Rdev)
		}
		x, err := readXattrs(
			func(b []byte) (int, error) { return unix.Llistxattr(p, b) },
			func(n string, b []byte) (int, error) { return unix.Lgetxattr(p, n, b) })
		must(t, err)
		x = nativeXattrs(x, base)
		names := make([]string, 0, len(x))
		for n := range x {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			d += fmt.Sprintf(" %s=%x", n, x[n])
		}
		out[rel] = d
		return nil
	})
	must(t, err)
	return out
}

// diffTrees reports what differs between two described trees.
func diffTrees(got, want map[string]string) string {
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s (want %s)", p, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s:\n   got %s\n  want %s", p, g, w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %s (%s)", p, g))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "\n")
}

func meta(sandbox string) Manifest {
	return Manifest{SandboxID: sandbox, ImageDigest: "sha256:" + strings.Repeat("ab", 32), Consistency: Stopped}
}

// chunkFiles lists the chunk hexes on disk.
func chunkFiles(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(s.dir, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, d.Name())
		}
		return err
	})
	must(t, err)
	slices.Sort(out)
	return out
}
