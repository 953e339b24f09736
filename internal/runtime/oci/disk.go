package oci

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/loopdev"
)

// A sandbox with a disk limit keeps its upper layer on its own ext4 filesystem: a
// sparse image file, loop-mounted while the container runs. Writes past the cap get
// ENOSPC inside that sandbox only. A new image is a sparse copy of a template formatted
// once per size (a few MiB of metadata: cheaper than running mkfs.ext4 each time), and
// a small pool of ready images of the default size is kept in the background.

const diskImage = "disk.img"

// mkfsDisk formats a sparse ext4 image of size bytes at path (written under a
// temporary name and renamed, so a crash never leaves a half-formatted image in place).
// It has no resize inode: its reserved group descriptor blocks, room to grow the file
// system online to 1,024 times its size, are 4 MiB written in every image of the
// default size (a sandbox's disk is never grown), against about 240 KiB for the rest
// of a new image's metadata: the host's disk, not its memory, bounded how many
// sandboxes a node could hold.
func mkfsDisk(ctx context.Context, path string, size int64) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	err := loopdev.MakeImage(ctx, tmp, size, "-O", "^resize_inode")
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// diskTemplates keeps one freshly formatted image per size in dir, for the first
// maxDiskTemplates sizes asked for (the pool's comes first), and makes new images as
// sparse copies of them; an image of any other size is formatted on its own, so that
// creates with ever new sizes cannot fill the host's disk with templates. A template is
// only ever read: every image copied from it is a sandbox's own file.
type diskTemplates struct {
	dir string

	mu    sync.Mutex
	sizes map[int64]*sync.Mutex // one mkfs per size at a time
}

// maxDiskTemplates bounds the sizes diskTemplates keeps a template of.
const maxDiskTemplates = 4

// newDiskTemplates starts with no template: those of an earlier run, whatever their
// sizes, are removed.
func newDiskTemplates(dir string) *diskTemplates {
	os.RemoveAll(dir)
	return &diskTemplates{dir: dir, sizes: map[int64]*sync.Mutex{}}
}

// path is the template of size bytes: the size is the whole key, since every image is
// formatted alike.
func (t *diskTemplates) path(size int64) string {
	return filepath.Join(t.dir, "ext4-"+strconv.FormatInt(size, 10)+".img")
}

// template returns the template of size bytes, formatting it first if there is none,
// or "" when size is not one the templates are kept for.
func (t *diskTemplates) template(ctx context.Context, size int64) (string, error) {
	t.mu.Lock()
	mu := t.sizes[size]
	if mu == nil {
		if len(t.sizes) >= maxDiskTemplates {
			t.mu.Unlock()
			return "", nil
		}
		mu = &sync.Mutex{}
		t.sizes[size] = mu
	}
	t.mu.Unlock()
	p := t.path(size)
	mu.Lock()
	defer mu.Unlock()
	if st, err := os.Stat(p); err == nil && st.Size() == size {
		return p, nil
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return "", err
	}
	os.Remove(p) // a template of the wrong size is no template
	if err := mkfsDisk(ctx, p, size); err != nil {
		return "", err
	}
	// The copies must never see a template that a crash left unwritten.
	if err := syncFileAndDir(p); err != nil {
		os.Remove(p)
		return "", err
	}
	return p, nil
}

// make writes a new formatted image of size bytes at path: a sparse copy of the
// template, synced, under a temporary name and renamed.
func (t *diskTemplates) make(ctx context.Context, path string, size int64) error {
	tmpl, err := t.template(ctx, size)
	if err != nil {
		return err
	}
	if tmpl == "" {
		return mkfsDisk(ctx, path, size)
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	err = copySparse(tmpl, tmp)
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// syncFile puts a file's data on stable storage.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mountDisk attaches img to a free loop device (detached automatically on unmount) and
// mounts its ext4 at dir with the mount options opts (usually none). It first waits for
// any earlier mount of img to be gone for good (see waitReleased), and repairs the file
// system first if it records errors or if the mount finds it damaged (diskcheck.go).
func mountDisk(ctx context.Context, log *slog.Logger, img, dir, opts string) error {
	if err := loopdev.WaitReleased(img); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if bad, err := recordsErrors(img); err != nil {
		return err
	} else if bad {
		if err := repairDisk(ctx, log, img, "its file system recorded errors"); err != nil {
			return err
		}
	}
	err := loopdev.Mount(img, dir, opts)
	if !needsRepair(err) {
		return err
	}
	// The failed mount's loop device goes on its last close; e2fsck must have the
	// image to itself.
	if werr := loopdev.WaitReleased(img); werr != nil {
		return errors.Join(err, werr)
	}
	if rerr := repairDisk(ctx, log, img, err.Error()); rerr != nil {
		return rerr
	}
	return loopdev.Mount(img, dir, opts)
}

// Every unmount here is lazy (MNT_DETACH): the ext4 of a disk image lives on, with
// writes it has not flushed yet, until the last process that holds it (a container
// still ending, a daemon killed half way through a stop) lets go; only then is the
// loop device detached. Mounting or copying the image before that would read it
// without those writes, and a second ext4 over the same file would lose them for
// good. So whoever is about to read the image, and a stop about to report the sandbox
// stopped, first waits for its loop device to be gone.

// diskPool keeps a few formatted images of one size ready, each attached to its loop
// device and mounted in the pool's directory: attaching and mounting a new ext4 is
// most of what a sandbox's disk costs its create (the mount writes the file system's
// superblocks and flushes them), and a ready image only moves. The pool's directory
// holds, per ready image N:
//
//	N.img      the image (and N.img.loop, its loop device: loopdev.Record)
//	N.mnt      its mount
//
// and N.new, an image being made and mounted; an image is ready once named N.img. A
// create takes one by renaming it into the sandbox's directory, binds its mount at the
// sandbox's and lets go of the pool's. Whatever a daemon left in the directory (it may
// have been killed between any two steps) is unmounted and removed when the next one
// starts, and the pool refilled; Close unmounts the ready images.
type diskPool struct {
	dir  string
	size int64
	want int
	tmpl *diskTemplates
	log  *slog.Logger

	mu     sync.Mutex // held by a take and by close: close unmounts no image a take moves
	closed bool
	seq    int
	wake   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newDiskPool(dir string, size int64, want int, tmpl *diskTemplates, log *slog.Logger) (*diskPool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := clearDiskPool(dir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &diskPool{dir: dir, size: size, want: want, tmpl: tmpl, log: log, wake: make(chan struct{}, 1), cancel: cancel}
	p.wg.Add(1)
	go p.fill(ctx)
	return p, nil
}

// clearDiskPool unmounts and removes every image an earlier daemon left in dir, ready
// or not; the templates (newDiskTemplates) are not its business. A mount left of an
// image a sandbox took, but did not yet bind, goes too: that sandbox's create never
// finished, and its disk is released for the rollback.
func clearDiskPool(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch filepath.Ext(e.Name()) {
		case ".mnt":
			if err := bindsource.Unmount(p); err != nil {
				errs = append(errs, err)
			} else if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		case ".img", ".new", ".tmp", ".loop":
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// close stops the refill and unmounts the ready images (a loop device goes with its
// mount); the next daemon's pool removes them.
func (p *diskPool) close() {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, img := range p.ready() {
		bindsource.Unmount(mountOf(img))
	}
}

// mountOf is where the pool's image img (N.img or N.new) is mounted: N.mnt.
func mountOf(img string) string {
	return strings.TrimSuffix(img, filepath.Ext(img)) + ".mnt"
}

func (p *diskPool) ready() []string {
	entries, _ := os.ReadDir(p.dir)
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".img") {
			out = append(out, filepath.Join(p.dir, e.Name()))
		}
	}
	return out
}

// take moves a ready image to dst, mounted at fsDir; false when the pool is empty. An
// error says an image was moved but could not be mounted there (it is unmounted).
func (p *diskPool) take(dst, fsDir string) (bool, error) {
	defer func() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, nil
	}
	for _, img := range p.ready() {
		mnt := mountOf(img)
		if ok, err := bindsource.MountRoot(mnt); err != nil || !ok {
			// Unmounted behind the pool's back: binding its directory would give the
			// sandbox a layer on the host's disk, past its cap. It goes; the refill
			// makes another.
			p.log.Warn("a ready disk image is no longer mounted; dropped", "image", img, "err", err)
			os.Remove(img)
			loopdev.Forget(img)
			os.Remove(mnt)
			continue
		}
		if err := loopdev.Rename(img, dst); err != nil {
			// No other take runs (p.mu): this image cannot move; try the next.
			p.log.Warn("move a ready disk image from the pool", "image", img, "err", err)
			continue
		}
		err := os.MkdirAll(fsDir, 0o711)
		if err == nil {
			err = unix.Mount(mnt, fsDir, "", unix.MS_BIND, "")
		}
		// The bind holds the file system (and so the loop device) from now on.
		if uerr := bindsource.Unmount(mnt); uerr != nil {
			p.log.Warn("unmount a taken disk image from the pool", "mount", mnt, "err", uerr)
		} else {
			os.Remove(mnt)
		}
		if err != nil {
			return true, fmt.Errorf("mount the disk image %s at %s: %w", dst, fsDir, err)
		}
		return true, nil
	}
	return false, nil
}

func (p *diskPool) fill(ctx context.Context) {
	defer p.wg.Done()
	for {
		for len(p.ready()) < p.want && ctx.Err() == nil {
			p.mu.Lock()
			p.seq++
			name := filepath.Join(p.dir, fmt.Sprintf("%d-%d", time.Now().UnixNano(), p.seq))
			p.mu.Unlock()
			if err := p.add(ctx, name); err != nil {
				if ctx.Err() == nil {
					p.log.Warn("make a ready disk image", "err", err)
				}
				break // try again when woken
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
	}
}

// add makes the image name.new, mounts it at name.mnt and names it ready (name.img).
func (p *diskPool) add(ctx context.Context, name string) (retErr error) {
	img, mnt := name+".new", name+".mnt"
	defer func() {
		if retErr != nil {
			bindsource.Unmount(mnt)
			os.Remove(mnt)
			os.Remove(img)
			loopdev.Forget(img)
		}
	}()
	if err := p.tmpl.make(ctx, img, p.size); err != nil {
		return err
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	if err := loopdev.Mount(img, mnt, ""); err != nil {
		return err
	}
	return loopdev.Rename(img, name+".img")
}
