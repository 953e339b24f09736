// Package tartree packs a directory tree into a tar stream and unpacks one into a
// directory, both through an *os.Root, so that neither ever reaches outside the
// directory it was given. It is plain Go over the os package (it builds on every OS):
// the CLI and the Go SDK unpack downloads with it on the host, and the agent packs and
// unpacks with it inside a sandbox. It must not import anything of Airlock.
//
// Hostile surface: Extract's archive may come from a sandbox that chose every byte.
// Every entry is checked before anything is written for it: its name (relative, no
// "..", bounded length and depth), its type (directories, regular files, symbolic
// links, hard links to a file of the same archive; devices, FIFOs and the rest are
// refused), its declared size (against what is left of Limits.MaxBytes) and the count
// (Limits.MaxEntries). Nothing is ever written through a symbolic link: each parent
// of an entry is looked at without following links (a link there refuses the entry),
// and files are created with O_EXCL after what was at their name is removed, so the
// kernel refuses to follow a link put there meanwhile. A refused archive stops at the
// refused entry: what came before it stays in the directory, nothing is outside it.
package tartree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
)

// Limits bound one archive. A zero field takes its default.
type Limits struct {
	MaxEntries int64 // entries of any kind (default DefaultMaxEntries)
	MaxBytes   int64 // bytes of regular files, summed (default DefaultMaxBytes)
	MaxName    int   // bytes of an entry's name (default 4096)
	MaxDepth   int   // elements of an entry's name (default 256)
}

// The default limits.
const (
	DefaultMaxEntries = 500_000
	DefaultMaxBytes   = 8 << 30
	defaultMaxName    = 4096
	defaultMaxDepth   = 256
	maxElem           = 255 // bytes of one element of a name (NAME_MAX)
)

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxName <= 0 {
		l.MaxName = defaultMaxName
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = defaultMaxDepth
	}
	return l
}

// Summary counts what an archive held.
type Summary struct {
	Files int64 `json:"files"`
	Dirs  int64 `json:"dirs"`
	Links int64 `json:"links"` // symbolic and hard links
	Bytes int64 `json:"bytes"` // bytes of regular files
}

// String is the one line the CLI prints when a copy is done.
func (s Summary) String() string {
	return fmt.Sprintf("%d files, %d directories, %d links, %s", s.Files, s.Dirs, s.Links, human(s.Bytes))
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		suffix = s
		if v < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// Error is a refused archive: the entry and why.
type Error struct {
	Entry  string // the entry's name as the archive gave it ("" for the archive as a whole)
	Reason string
	Limit  bool // a limit of Limits was passed
}

func (e *Error) Error() string {
	if e.Entry == "" {
		return "archive refused: " + e.Reason
	}
	return fmt.Sprintf("archive entry %q refused: %s", e.Entry, e.Reason)
}

// ErrRefused matches every *Error with errors.Is.
var ErrRefused = errors.New("archive refused")

func (e *Error) Is(target error) bool { return target == ErrRefused }

// Options change what Extract keeps.
type Options struct {
	Limits Limits
	// KeepSpecialBits keeps setuid and setgid bits; without it they are dropped, so
	// that a sandbox cannot plant a setuid program on the host.
	KeepSpecialBits bool
	// Progress, if set, is called after each entry with the counts so far.
	Progress func(Summary)
}

// CheckName checks an entry's name and returns it clean and relative ("a/b"); "." is
// the directory itself.
func CheckName(name string, lim Limits) (string, error) {
	lim = lim.withDefaults()
	bad := func(format string, a ...any) error {
		return &Error{Entry: name, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case name == "":
		return "", bad("an empty name")
	case len(name) > lim.MaxName:
		return "", &Error{Entry: name[:64] + "…", Reason: fmt.Sprintf("a name of %d bytes; at most %d are allowed", len(name), lim.MaxName), Limit: true}
	case strings.IndexByte(name, 0) >= 0:
		return "", bad("a NUL byte in the name")
	case name[0] == '/' || strings.HasPrefix(name, `\`) || (len(name) > 1 && name[1] == ':'):
		return "", bad("an absolute name; entries must be relative to the directory")
	case strings.ContainsRune(name, '\\'):
		return "", bad(`a backslash in the name; elements are separated by "/"`)
	}
	elems := strings.Split(strings.TrimSuffix(name, "/"), "/")
	out := elems[:0]
	for _, e := range elems {
		switch {
		case e == "" || e == ".":
			continue
		case e == "..":
			return "", bad(`a ".." element; entries must stay inside the directory`)
		case len(e) > maxElem:
			return "", &Error{Entry: name, Reason: fmt.Sprintf("an element of %d bytes; at most %d are allowed", len(e), maxElem), Limit: true}
		}
		out = append(out, e)
	}
	if len(out) > lim.MaxDepth {
		return "", &Error{Entry: name, Reason: fmt.Sprintf("%d elements deep; at most %d are allowed", len(out), lim.MaxDepth), Limit: true}
	}
	if len(out) == 0 {
		return ".", nil
	}
	return strings.Join(out, "/"), nil
}

// extractor is one Extract.
type extractor struct {
	root  *os.Root
	opt   Options
	lim   Limits
	sum   Summary
	n     int64
	dirs  map[string]bool // directories known real (not links), made or looked at
	files map[string]bool // regular files this archive made: what a hard link may name
	modes []dirMode       // directories' modes, set once everything is in them
	moded map[string]int  // index in modes of each directory's entry
	fresh map[string]bool // directories this archive made: nothing is in them but what it made
	made  map[string]bool // files and links this archive made
	subs  map[string]*os.Root
}

// maxSubs bounds the directories an Extract keeps open at once.
const maxSubs = 64

// sub is the directory dir (checked real by mkdirs) as a Root of its own, so that an
// entry in it costs one system call to create, not one per element of its path.
func (x *extractor) sub(dir string) (*os.Root, error) {
	if dir == "." {
		return x.root, nil
	}
	if r, ok := x.subs[dir]; ok {
		return r, nil
	}
	if len(x.subs) >= maxSubs {
		x.closeSubs()
	}
	r, err := x.root.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	x.subs[dir] = r
	return r, nil
}

func (x *extractor) closeSubs() {
	for k, r := range x.subs {
		r.Close()
		delete(x.subs, k)
	}
}

type dirMode struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// Extract unpacks the tar stream r into root. See the package doc for what it refuses;
// a refusal is an *Error (errors.Is ErrRefused).
func Extract(root *os.Root, r io.Reader, opt Options) (Summary, error) {
	x := &extractor{root: root, opt: opt, lim: opt.Limits.withDefaults(),
		dirs: map[string]bool{".": true}, files: map[string]bool{}, moded: map[string]int{},
		fresh: map[string]bool{}, made: map[string]bool{}, subs: map[string]*os.Root{}}
	err := x.run(tar.NewReader(r))
	x.closeSubs()
	// Directories get their modes last, deepest first, so that a read-only one did not
	// stop its own entries being written.
	for i := len(x.modes) - 1; i >= 0; i-- {
		d := x.modes[i]
		if cerr := root.Chmod(d.name, d.mode); cerr != nil && err == nil {
			err = cerr
		}
		if !d.mtime.IsZero() {
			_ = root.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
	return x.sum, err
}

func (x *extractor) run(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var te *Error
			if errors.As(err, &te) {
				return err
			}
			return &Error{Reason: fmt.Sprintf("not a valid tar stream: %v", err)}
		}
		if x.n++; x.n > x.lim.MaxEntries {
			return &Error{Entry: hdr.Name, Reason: fmt.Sprintf("more than %d entries (the limit on entries)", x.lim.MaxEntries), Limit: true}
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
		if x.opt.Progress != nil {
			x.opt.Progress(x.sum)
		}
	}
}

func (x *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	name, err := CheckName(hdr.Name, x.lim)
	if err != nil {
		return err
	}
	refuse := func(format string, a ...any) error {
		return &Error{Entry: hdr.Name, Reason: fmt.Sprintf(format, a...)}
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	if x.opt.KeepSpecialBits {
		if hdr.Mode&04000 != 0 {
			mode |= fs.ModeSetuid
		}
		if hdr.Mode&02000 != 0 {
			mode |= fs.ModeSetgid
		}
	}
	if hdr.Mode&01000 != 0 {
		mode |= fs.ModeSticky
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.mkdirs(hdr.Name, name); err != nil {
			return err
		}
		if name == "." {
			return nil // the directory itself keeps the mode its owner gave it
		}
		if i, ok := x.moded[name]; ok { // a directory named again: its last entry counts
			x.modes[i] = dirMode{name, mode, hdr.ModTime}
			return nil
		}
		x.moded[name] = len(x.modes)
		x.modes = append(x.modes, dirMode{name, mode, hdr.ModTime})
		x.sum.Dirs++
		return nil
	case tar.TypeReg, tar.TypeRegA:
		if name == "." {
			return refuse("a file cannot replace the directory itself")
		}
		if hdr.Size < 0 || hdr.Size > x.lim.MaxBytes-x.sum.Bytes {
			return &Error{Entry: hdr.Name, Limit: true, Reason: fmt.Sprintf("a file of %d bytes would pass the limit of %d bytes in all (%d written so far)",
				hdr.Size, x.lim.MaxBytes, x.sum.Bytes)}
		}
		if err := x.clear(hdr.Name, name); err != nil {
			return err
		}
		if err := x.writeFile(name, mode, hdr, tr); err != nil {
			return err
		}
		x.files[name] = true
		x.sum.Files++
		x.sum.Bytes += hdr.Size
		return nil
	case tar.TypeSymlink:
		if name == "." {
			return refuse("a link cannot replace the directory itself")
		}
		if hdr.Linkname == "" || len(hdr.Linkname) > x.lim.MaxName || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return refuse("a symbolic link with an empty, NUL-bearing or over-long target")
		}
		if err := x.clear(hdr.Name, name); err != nil {
			return err
		}
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		x.sum.Links++
		return nil
	case tar.TypeLink:
		target, err := CheckName(hdr.Linkname, x.lim)
		if err != nil || !x.files[target] {
			return refuse("a hard link to %q, which is not a file made earlier from this archive", hdr.Linkname)
		}
		if err := x.clear(hdr.Name, name); err != nil {
			return err
		}
		if fi, err := x.root.Lstat(target); err != nil || !fi.Mode().IsRegular() {
			return refuse("a hard link to %q, which is no longer a regular file", hdr.Linkname)
		}
		if err := x.root.Link(target, name); err != nil {
			return err
		}
		x.sum.Links++
		return nil
	case tar.TypeChar, tar.TypeBlock:
		return refuse("a device node; only directories, regular files and links are unpacked")
	case tar.TypeFifo:
		return refuse("a FIFO; only directories, regular files and links are unpacked")
	}
	return refuse("an entry of type %q; only directories, regular files and links are unpacked", hdr.Typeflag)
}

// parents makes sure every parent of name is a real directory (not a link), making the
// missing ones.
func (x *extractor) parents(orig, name string) error {
	dir := path.Dir(name)
	if x.dirs[dir] {
		return nil
	}
	return x.mkdirs(orig, dir)
}

// mkdirs is mkdir -p of name, never through a link: each element that exists must be
// a directory itself.
func (x *extractor) mkdirs(orig, name string) error {
	if x.dirs[name] {
		return nil
	}
	elems := strings.Split(name, "/")
	for i := range elems {
		p := strings.Join(elems[:i+1], "/")
		if x.dirs[p] {
			continue
		}
		fi, err := x.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := x.root.Mkdir(p, 0o700); err != nil {
				return err
			}
			x.fresh[p] = true
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return &Error{Entry: orig, Reason: fmt.Sprintf("its path goes through the symbolic link %q, which is never followed", p)}
		case !fi.IsDir():
			return &Error{Entry: orig, Reason: fmt.Sprintf("its path goes through %q, which is not a directory", p)}
		}
		x.dirs[p] = true
	}
	return nil
}

// clear readies name for a new file or link: its parents real directories, and
// nothing at the name but a directory it refuses.
func (x *extractor) clear(orig, name string) error {
	if err := x.parents(orig, name); err != nil {
		return err
	}
	if x.fresh[path.Dir(name)] && !x.made[name] {
		if x.dirs[name] {
			return &Error{Entry: orig, Reason: "a directory is already at its name"}
		}
		x.made[name] = true
		return nil // nothing is there
	}
	x.made[name] = true
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return &Error{Entry: orig, Reason: "a directory is already at its name"}
	}
	delete(x.files, name)
	return x.root.Remove(name)
}

func (x *extractor) writeFile(name string, mode fs.FileMode, hdr *tar.Header, tr io.Reader) (retErr error) {
	dir, base := path.Split(name)
	sub, err := x.sub(path.Clean(dir))
	if err != nil {
		return err
	}
	// O_EXCL: the kernel refuses a link that appeared at the name since clear.
	f, err := sub.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.Close(); retErr == nil {
			retErr = err
		}
		if retErr == nil && !hdr.ModTime.IsZero() {
			_ = sub.Chtimes(base, hdr.ModTime, hdr.ModTime)
		}
	}()
	if n, err := io.CopyN(f, tr, hdr.Size); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &Error{Entry: hdr.Name, Reason: fmt.Sprintf("the stream ended after %d of the file's %d bytes", n, hdr.Size)}
		}
		return err
	}
	return f.Chmod(mode)
}
