package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUsernsCacheKeyedByBase: the cache hands out the namespace of the base asked for —
// the same one again for the same base, never one base's for another — as an idmapped
// mount through it shows (a file of host root appears owned by the base), and it keeps
// no more than its bound.
func TestUsernsCacheKeyedByBase(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (user namespaces with a mapping, idmapped mounts)")
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("needs cat as the holder")
	}
	c := newUsernsCache([]string{cat}, 2)
	defer c.close()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	nsOf := func(base uint32) (ino uint64, owner uint32) {
		t.Helper()
		fd, err := c.get(base)
		if err != nil {
			t.Fatalf("get %d: %v", base, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "m")
		if err := idmapMount(fd, src, dst, true); err != nil {
			t.Skipf("idmapped mounts unavailable here: %v", err)
		}
		defer unix.Unmount(dst, unix.MNT_DETACH)
		var fst unix.Stat_t
		if err := unix.Stat(filepath.Join(dst, "f"), &fst); err != nil {
			t.Fatal(err)
		}
		return st.Ino, fst.Uid
	}
	const a, b, third = 1 << 20, 1<<20 + 65536, 1<<20 + 2*65536
	inoA, ownerA := nsOf(a)
	inoB, ownerB := nsOf(b)
	if ownerA != a || ownerB != b {
		t.Fatalf("a file of host root shows as uid %d through base %d's namespace and %d through %d's; want the bases", ownerA, a, ownerB, b)
	}
	if inoA == inoB {
		t.Fatalf("bases %d and %d got the same namespace", a, b)
	}
	if again, owner := nsOf(a); again != inoA || owner != a {
		t.Fatalf("base %d again: namespace %d (owner %d), want the cached %d", a, again, owner, inoA)
	}
	nsOf(third) // past the bound of 2: b, the least recently used, goes
	if len(c.fds) != 2 {
		t.Fatalf("the cache keeps %d namespaces, bound 2", len(c.fds))
	}
	if _, ok := c.fds[b]; ok {
		t.Fatalf("base %d was kept; the least recently used should have gone", b)
	}
}
