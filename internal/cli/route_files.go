package cli

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/client"
)

// workspaceTar writes the workspace as a tar to an unlinked temporary file and returns
// it, rewound: every directory, regular file and symbolic link (as a link, never
// followed), owned by root, at most limit bytes of file data. A device, socket or pipe
// refuses the whole workspace: nothing is skipped silently.
//
// The workspace may be changing as it is read (a sandbox may have it mounted
// read-write): every directory and file is opened through an os.Root of it, so a
// directory swapped for a symbolic link cannot lead a read out of it, and a file is
// checked to be regular once open, so one swapped for a pipe cannot hold the read.
func workspaceTar(dir string, limit int64) (_ *os.File, retErr error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("read the workspace: %w", err)
	}
	defer root.Close()
	f, err := os.CreateTemp("", "airlock-workspace-*.tar")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // the open file is all that is needed
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := root.Lstat(rel)
		if err != nil {
			return err
		}
		link := ""
		switch mode := fi.Mode(); {
		case mode.IsRegular():
			if total += fi.Size(); total > limit {
				return usagef("--workspace %s holds more than %s of files; a sandbox gets at most that, so use a smaller workspace or --access none", dir, formatSize(limit))
			}
		case mode.IsDir():
		case mode&fs.ModeSymlink != 0:
			if link, err = root.Readlink(rel); err != nil {
				return err
			}
		default:
			return usagef("--workspace %s holds %s, a %s; special files are not sent to a sandbox", dir, termSafe(rel), fileKind(mode))
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		src, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer src.Close()
		if now, err := src.Stat(); err != nil || !now.Mode().IsRegular() {
			return fmt.Errorf("%s changed while it was read: no longer a regular file", p)
		}
		if _, err := io.CopyN(tw, src, hdr.Size); err != nil {
			return fmt.Errorf("%s changed while it was read: %w", p, err)
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return nil, err
		}
		return nil, fmt.Errorf("read the workspace: %w", err)
	}
	return f, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// listed is one file the sandbox says the command made: its path relative to the
// sandbox's root (work/… or workspace/…), permission bits and size.
type listed struct {
	path string
	mode fs.FileMode
	size int64
}

// parseListing reads find's "%m\t%s\t%p\0" records. The text comes from the sandbox:
// a record whose path is not a clean relative path under work/ (or workspace/, when
// that is copied back), or holds control characters, is refused with a warning.
func parseListing(text string, withWorkspace bool) (entries []listed, warnings []string) {
	records := strings.Split(text, "\x00")
	records = records[:len(records)-1] // the last is empty, or cut short
	for _, r := range records {
		fields := strings.SplitN(r, "\t", 3)
		if len(fields) != 3 {
			warnings = append(warnings, fmt.Sprintf("a malformed entry in the list of files was ignored: %q", shorten(r)))
			continue
		}
		mode, err1 := strconv.ParseUint(fields[0], 8, 32)
		size, err2 := strconv.ParseInt(fields[1], 10, 64)
		p := fields[2]
		if err := listedPath(p, withWorkspace); err != nil || err1 != nil || err2 != nil || size < 0 {
			warnings = append(warnings, fmt.Sprintf("the file %q was left behind: %v", shorten(p), errors.Join(err, err1, err2)))
			continue
		}
		entries = append(entries, listed{path: p, mode: fs.FileMode(mode) & 0o777, size: size})
	}
	return entries, warnings
}

// listedPath refuses a path a sandbox listed unless it is clean, relative and under
// work/ (or workspace/), valid UTF-8 without control characters or characters that
// reorder text (the name becomes a host file's, shown by ls and file managers).
func listedPath(p string, withWorkspace bool) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return errors.New("not a clean relative path")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return errors.New("control characters in the name")
		}
	}
	if needsEscape(p) {
		return errors.New("control or direction characters, or bytes that are not UTF-8, in the name")
	}
	if strings.HasPrefix(p, "work/") || withWorkspace && strings.HasPrefix(p, "workspace/") {
		return nil
	}
	return errors.New("outside /work")
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// artifactDests are the two places files come back to, each opened as an os.Root so
// that no name a sandbox chose can lead a write out of it.
type artifactDests struct {
	artifacts, workspace *os.Root
}

func (d *artifactDests) close() {
	for _, r := range []*os.Root{d.artifacts, d.workspace} {
		if r != nil {
			r.Close()
		}
	}
}

// copy downloads one listed file to where it belongs on the host and returns it as an
// artifact with the bytes written; at most budget bytes are.
func (d *artifactDests) copy(ctx context.Context, cl *client.Client, w *work, e listed, budget int64) (artifact, int64, error) {
	top, rel, _ := strings.Cut(e.path, "/")
	var root **os.Root
	var dir string
	if top == "workspace" {
		root, dir = &d.workspace, w.workspace
	} else {
		root, dir = &d.artifacts, w.artifacts
	}
	if *root == nil {
		if top == "work" {
			if _, err := makeArtifacts(dir); err != nil {
				return artifact{}, 0, err
			}
		}
		r, err := os.OpenRoot(dir)
		if err != nil {
			return artifact{}, 0, err
		}
		*root = r
	}
	n, err := writeInRoot(*root, rel, e.mode&0o755|0o600, budget, func(wr io.Writer) error {
		_, err := cl.Download(ctx, w.name, "/"+e.path, wr)
		return err
	})
	if err != nil {
		return artifact{}, n, err
	}
	return artifact{Path: "/" + e.path, HostPath: filepath.Join(dir, filepath.FromSlash(rel)), Size: n}, n, nil
}

// errTooBig is a download that passed its budget.
var errTooBig = errors.New("larger than the bytes left to copy out")

// writeInRoot writes rel inside root from fill, never following a symbolic link: each
// directory on the way must be a real directory (missing ones are made), and the file
// is written under a temporary name and renamed over rel, which replaces whatever was
// there (a link included) rather than writing through it. At most budget bytes.
func writeInRoot(root *os.Root, rel string, perm fs.FileMode, budget int64, fill func(io.Writer) error) (int64, error) {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		fi, err := root.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Mkdir(dir, 0o755); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, err
		case !fi.IsDir():
			return 0, fmt.Errorf("%s is not a directory on this host", dir)
		}
	}
	if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("%s is a directory on this host", rel)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(rel), ".airlock-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return 0, err
	}
	lw := &limitedWriter{w: f, left: budget}
	err = fill(lw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
		return lw.n, err
	}
	return lw.n, nil
}

// limitedWriter fails a write past left bytes.
type limitedWriter struct {
	w    io.Writer
	left int64
	n    int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errTooBig
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	l.n += int64(n)
	return n, err
}
