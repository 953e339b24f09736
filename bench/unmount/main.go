// Command unmount detaches every mount under a directory, deepest first, in one pass
// over the mount table: the bench scripts' cleanup after a killed daemon, which may
// leave tens of thousands (umount(8) reads the whole table again for each one).
//
//	go run ./bench/unmount DIR
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: unmount DIR")
		os.Exit(2)
	}
	dir := filepath.Clean(os.Args[1]) + "/"
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mps []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 {
			if mp := unescape.Replace(fs[4]); strings.HasPrefix(mp, dir) {
				mps = append(mps, mp)
			}
		}
	}
	f.Close()
	slices.Sort(mps)
	slices.Reverse(mps) // a mount before the ones it is under
	failed := 0
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			fmt.Fprintf(os.Stderr, "unmount %s: %v\n", mp, err)
			failed++
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}
