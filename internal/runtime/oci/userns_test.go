package oci

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
		return st.Ino, ownerThrough(t, fd)
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
	c, count := countingCache(t, 4)
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
	// One holder for base, one for the base after it, made ahead.
	if n := settled(count, 2); n != 2 {
		t.Errorf("%d callers at once started %d holders; want 2 (one for the base, one made ahead for the next)", callers, n)
	}
}

// ownerThrough is the owner a file of host root shows through an idmapped mount by the
// user namespace fd: the namespace's base.
func ownerThrough(t *testing.T, fd int) uint32 {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "m")
	if err := idmapMount(fd, src, dst, true); err != nil {
		t.Skipf("idmapped mounts unavailable here: %v", err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "f"), &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid
}

// countingCache is a cache of at most max whose holders count their starts (closed at
// the test's end), and that count.
func countingCache(t *testing.T, max int) (*usernsCache, func() int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (user namespaces with a mapping)")
	}
	holder, count := countingHolder(t)
	c := newUsernsCache(holder, max)
	t.Cleanup(c.close)
	return c, count
}

// countingHolder returns a holder argv that notes each start in a file, then waits for
// its standard input to close, and a count of the starts so far.
func countingHolder(t *testing.T) ([]string, func() int) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh as the holder")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(dir, "starts")
	return []string{sh, "-c", `echo . >> "$0"; exec cat`, starts}, func() int {
		data, _ := os.ReadFile(starts)
		return strings.Count(string(data), ".")
	}
}

// kept reports whether c keeps base's namespace, waiting for one being made (a get
// that makes one ahead marks it as being made before it returns).
func (c *usernsCache) kept(base uint32) bool {
	c.mu.Lock()
	done, making := c.pending[base]
	c.mu.Unlock()
	if making {
		<-done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.fds[base]
	return ok
}

// settled is the count of holder starts once it has reached want (or 5 s passed) and
// stayed for 100 ms: holders are reaped in the background, so one may note its start
// after the get that started it has returned.
func settled(count func() int, want int) int {
	for deadline := time.Now().Add(5 * time.Second); count() < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return count()
}

// TestUsernsCacheMakesTheNextBaseAhead: a base asked for the first time has the next
// base's namespace made in the background, with that base's own mapping, so the create
// that asks for it next starts no holder; a base found in the cache makes nothing ahead,
// and neither does a full cache (what is made ahead never pushes out a namespace kept).
func TestUsernsCacheMakesTheNextBaseAhead(t *testing.T) {
	c, starts := countingCache(t, 3)
	const a = 1 << 22
	fd, err := c.get(a)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if !c.kept(a + idRange) {
		t.Fatalf("base %d asked for the first time: the next base %d was not made ahead", a, a+idRange)
	}
	if n := settled(starts, 2); n != 2 {
		t.Fatalf("%d holders started; want 2 (the base and the one after it)", n)
	}
	fd, err = c.get(a + idRange)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if owner := ownerThrough(t, fd); owner != a+idRange {
		t.Fatalf("the namespace made ahead for base %d maps host root to %d; want the base", a+idRange, owner)
	}
	if n := settled(starts, 2); n != 2 {
		t.Fatalf("the base made ahead started a holder of its own when asked for: %d starts, want 2", n)
	}
	// Two kept, a+idRange found in the cache: a miss for another base now fills the
	// cache to its bound of 3, and nothing is made ahead.
	if c.kept(a + 2*idRange) {
		t.Fatalf("a base found in the cache made the one after it ahead")
	}
	const far = 1 << 24
	if fd, err = c.get(far); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if c.kept(far + idRange) {
		t.Fatalf("a full cache (bound 3) made a namespace ahead")
	}
	if _, ok := c.fds[a]; !ok {
		t.Fatalf("base %d was pushed out", a)
	}
}

// TestUsernsCacheCloseDuringAhead: a namespace still being made ahead when the cache
// closes is not kept after it.
func TestUsernsCacheCloseDuringAhead(t *testing.T) {
	c, _ := countingCache(t, 4)
	fd, err := c.get(1 << 23)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	c.close() // waits for the holder made ahead
	if len(c.fds) != 0 || len(c.pending) != 0 {
		t.Fatalf("after close the cache keeps %d namespaces and makes %d", len(c.fds), len(c.pending))
	}
}
