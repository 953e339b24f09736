package oci

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// TestUsernsCacheSharesAHolder: callers asking for a base at once (a sandbox's root
// filesystem and its volumes) get one namespace, made by one holder process.
func TestUsernsCacheSharesAHolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (user namespaces with a mapping)")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh as the holder")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(dir, "starts")
	// Each holder notes its start, then waits for its standard input to close.
	c := newUsernsCache([]string{sh, "-c", `echo . >> "$0"; exec cat`, starts}, 4)
	defer c.close()
	const callers, base = 8, 1 << 21
	inos := make([]uint64, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-gate
			fd, err := c.get(base)
			if err != nil {
				errs[i] = err
				return
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			errs[i] = unix.Fstat(fd, &st)
			inos[i] = st.Ino
		})
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, ino := range inos {
		if ino != inos[0] {
			t.Errorf("caller %d got namespace %d, caller 0 got %d; want one namespace", i, ino, inos[0])
		}
	}
	data, _ := os.ReadFile(starts)
	if n := strings.Count(string(data), "."); n != 1 {
		t.Errorf("%d callers at once started %d holders; want 1", callers, n)
	}
}
