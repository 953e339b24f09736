package sweep

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/leftover"
)

// Kinds of Item, in the order Run handles them.
const (
	KindContainer = "container"
	KindProcess   = "process"
	KindMount     = "mount"
	KindCgroup    = "cgroup"
	KindTable     = "nftables_table"
	KindVeth      = "veth"
)

// Item is one thing a node left on the host.
type Item = leftover.Item

// Run finds what the node whose state directory is dir, with record r, left on the
// host and, unless dryRun, removes it, in an order where each step frees what the next
// one needs: containers, then the processes still in its cgroups, the mounts under dir
// and on its secrets directory (the deepest and latest first), its cgroups (the
// deepest first), its nftables table, its veths. Every item is passed to each as it is
// handled, and returned. The caller makes sure the node is gone (StateDir does).
func Run(ctx context.Context, dir string, r Record, dryRun bool, each func(Item)) []Item {
	var out []Item
	emit := func(it Item, remove func() error) {
		if !dryRun && remove != nil {
			if err := remove(); err != nil {
				it.Error = err.Error()
			}
		}
		out = append(out, it)
		if each != nil {
			each(it)
		}
	}
	containers(ctx, r.Runtimes, emit)
	processes(ctx, r.CgroupParents, dryRun, emit)
	roots := []string{dir}
	if r.SecretsDir != "" {
		roots = append(roots, r.SecretsDir)
	}
	for _, m := range Mounts(roots...) {
		emit(Item{Kind: KindMount, Name: m}, func() error { return unmount(m) })
	}
	for _, cg := range cgroupTree(r.CgroupParents) {
		emit(Item{Kind: KindCgroup, Name: cg}, func() error { return removeCgroup(ctx, cg) })
	}
	if r.Table != "" {
		if ok, err := tableExists(r.Table); ok || err != nil {
			it := Item{Kind: KindTable, Name: "inet " + r.Table}
			if err != nil {
				it.Error = err.Error()
				emit(it, nil)
			} else {
				emit(it, func() error { return deleteTable(r.Table) })
			}
		}
	}
	if r.VethPrefix != "" {
		for _, l := range veths(r.VethPrefix) {
			emit(Item{Kind: KindVeth, Name: l.Attrs().Name}, func() error { return netlink.LinkDel(l) })
		}
	}
	return out
}

// containers handles the containers in each runtime's state root: `delete --force`
// kills a running one and removes its state.
func containers(ctx context.Context, rts []Runtime, emit func(Item, func() error)) {
	for _, rt := range rts {
		if _, err := os.Stat(rt.Root); err != nil {
			continue
		}
		bin, err := exec.LookPath(rt.Binary)
		if err != nil {
			// Without the binary, its containers' processes still end with their cgroups.
			emit(Item{Kind: KindContainer, Name: rt.Root, Error: "cannot list: " + err.Error()}, nil)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := exec.CommandContext(lctx, bin, "--root", rt.Root, "list", "--quiet").Output()
		cancel()
		if err != nil {
			emit(Item{Kind: KindContainer, Name: rt.Root, Error: "cannot list: " + err.Error()}, nil)
			continue
		}
		for _, id := range strings.Fields(string(b)) {
			emit(Item{Kind: KindContainer, Name: id}, func() error {
				dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				out, err := exec.CommandContext(dctx, bin, "--root", rt.Root, "delete", "--force", id).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%s delete: %v: %s", filepath.Base(bin), err, strings.TrimSpace(string(out)))
				}
				return nil
			})
		}
	}
}

// processes kills every process left in the cgroups under parents and waits (up to
// ten seconds) for them to be gone.
func processes(ctx context.Context, parents []string, dryRun bool, emit func(Item, func() error)) {
	pids := cgroupPids(parents)
	for _, pid := range pids {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		emit(Item{Kind: KindProcess, Name: strconv.Itoa(pid) + " " + strings.TrimSpace(string(comm))}, func() error { return kill(pid, parents) })
	}
	if dryRun || len(pids) == 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(cgroupPids(parents)) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL to pid, if it is still in a cgroup under one of parents: the
// pidfd pins the process between the check and the signal.
func kill(pid int, parents []string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // gone
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		_, path, _ := strings.Cut(line, ":")
		_, path, _ = strings.Cut(path, ":")
		for _, p := range parents {
			if path == "/"+p || strings.HasPrefix(path, "/"+p+"/") {
				in = true
			}
		}
	}
	if !in {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

const cgroupRoot = "/sys/fs/cgroup"

// hierarchies lists the mount points of the cgroup hierarchies: the root on a v2
// host, every controller's directory on v1 (or hybrid).
func hierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return []string{cgroupRoot}
	}
	entries, _ := os.ReadDir(cgroupRoot)
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupRoot, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.IsDir() { // a controller, or a link to one
			out = append(out, p)
		}
	}
	return out
}

// walkCgroups calls fn with every cgroup directory at and under parents, in every
// hierarchy, and its path relative to the hierarchy's root.
func walkCgroups(parents []string, fn func(dir, rel string)) {
	for _, h := range hierarchies() {
		for _, p := range parents {
			filepath.WalkDir(filepath.Join(h, p), func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					rel, _ := filepath.Rel(h, path)
					fn(path, rel)
				}
				return nil
			})
		}
	}
}

// cgroupTree lists the cgroups at and under parents, as paths relative to a
// hierarchy's root, in every hierarchy where one exists, children before parents.
func cgroupTree(parents []string) []string {
	seen := map[string]bool{}
	var out []string
	walkCgroups(parents, func(_, rel string) {
		if !seen[rel] {
			seen[rel] = true
			out = append(out, rel)
		}
	})
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

// cgroupPids lists the processes in the cgroups at and under parents, but this one.
func cgroupPids(parents []string) []int {
	seen := map[int]bool{os.Getpid(): true}
	var out []int
	walkCgroups(parents, func(dir, _ string) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	})
	slices.Sort(out)
	return out
}

// removeCgroup removes the cgroup rel in every hierarchy, retrying for a few seconds
// while the kernel still counts a process that was just killed.
func removeCgroup(ctx context.Context, rel string) error {
	var errs []error
	for _, h := range hierarchies() {
		p := filepath.Join(h, rel)
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := unix.Rmdir(p)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) || ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", p, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// Mounts lists the mount points of this process's mount namespace at or below any of
// roots, the latest mounted first: the order to unmount them in.
func Mounts(roots ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := bindsource.UnescapeMount(fields[4])
		for _, root := range roots {
			if mp == root || strings.HasPrefix(mp, strings.TrimSuffix(root, "/")+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	slices.Reverse(out)
	return out
}

// unmount detaches the mount at mp; one already gone (its parent was detached
// first) is not an error.
func unmount(mp string) error {
	err := unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", mp, err)
}

func tableExists(name string) (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }), nil
}

func deleteTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table inet %s: %w", name, err)
	}
	return nil
}

// veths lists the host's links named as a node with prefix names its veths: the
// prefix and eight hex digits.
func veths(prefix string) []netlink.Link {
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil
	}
	var out []netlink.Link
	for _, l := range links {
		rest, ok := strings.CutPrefix(l.Attrs().Name, prefix)
		if b, err := hex.DecodeString(rest); ok && err == nil && len(b) == 4 {
			out = append(out, l)
		}
	}
	return out
}
