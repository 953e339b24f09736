package tartree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"
)

// Pack writes the tree under root as a tar stream to w, its entries named relative to
// root, and counts it. Symbolic
// links are written as links and never followed; sockets, FIFOs and devices are
// skipped (skip, if set, is told each one); hard links are written as files.
func Pack(root *os.Root, w io.Writer, progress func(Summary), skip func(name string, mode fs.FileMode)) (Summary, error) {
	p := &packer{tw: tar.NewWriter(w), progress: progress, skip: skip, buf: make([]byte, 256<<10)}
	if err := p.dir(root, "", 0); err != nil {
		return p.sum, err
	}
	return p.sum, p.tw.Close()
}

type packer struct {
	tw       *tar.Writer
	sum      Summary
	progress func(Summary)
	skip     func(string, fs.FileMode)
	buf      []byte
}

// dir writes the entries of the directory d (named prefix in the archive, "" for the
// top), in name order, and its subtrees. Each directory is a Root of its own, so
// that every look at an entry is one system call relative to it.
func (p *packer) dir(d *os.Root, prefix string, depth int) error {
	if depth > defaultMaxDepth {
		return fmt.Errorf("%s: more than %d directories deep", prefix, defaultMaxDepth)
	}
	f, err := d.Open(".")
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		if err := p.one(d, n, prefix+n, depth); err != nil {
			return err
		}
	}
	return nil
}

func (p *packer) one(d *os.Root, n, rel string, depth int) error {
	fi, err := d.Lstat(n)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	} else if err != nil {
		return err
	}
	hdr := &tar.Header{Name: rel, ModTime: fi.ModTime().Truncate(time.Second), Mode: tarMode(fi.Mode()), Format: tar.FormatPAX}
	switch {
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		if err := p.tw.WriteHeader(hdr); err != nil {
			return err
		}
		p.sum.Dirs++
		p.report()
		sub, err := d.OpenRoot(n)
		if err != nil {
			return err
		}
		defer sub.Close()
		return p.dir(sub, rel+"/", depth+1)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := d.Readlink(n)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		if err := p.tw.WriteHeader(hdr); err != nil {
			return err
		}
		p.sum.Links++
	case fi.Mode().IsRegular():
		if err := p.file(d, n, hdr); err != nil {
			return err
		}
	default:
		if p.skip != nil {
			p.skip(rel, fi.Mode())
		}
		return nil
	}
	p.report()
	return nil
}

func (p *packer) file(d *os.Root, n string, hdr *tar.Header) error {
	f, err := d.OpenFile(n, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil // replaced meanwhile
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	// The header promised Size bytes: a file that shrank meanwhile is padded with
	// zeros and one that grew is cut, so the stream stays whole.
	n64, err := io.CopyBuffer(p.tw, io.LimitReader(f, hdr.Size), p.buf)
	if err != nil {
		return err
	}
	for left := hdr.Size - n64; left > 0; {
		k := min(left, int64(len(p.buf)))
		clear(p.buf[:k])
		if _, err := p.tw.Write(p.buf[:k]); err != nil {
			return err
		}
		left -= k
	}
	p.sum.Files++
	p.sum.Bytes += hdr.Size
	return nil
}

func (p *packer) report() {
	if p.progress != nil {
		p.progress(p.sum)
	}
}

func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 04000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 02000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 01000
	}
	return mode
}
