package cli

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// treeFlags are cp's flags for directory trees.
type treeFlags struct {
	recursive, extract bool
	maxFiles           int64
	maxBytes           string
}

// copyTree is cp -r and cp --extract.
func copyTree(c *cmd, cl *client.Client, tf *treeFlags, pos []string, srcName, srcPath, dstName, dstPath string, dstLocal bool) error {
	if tf.recursive && tf.extract {
		return usagef("-r and --extract do not go together: --extract unpacks an archive, -r copies a directory")
	}
	if !tf.recursive && !tf.extract {
		return usagef("--max-files and --max-bytes bound a tree download (cp -r NAME:/dir DIR)")
	}
	opts := &client.TreeOptions{MaxEntries: tf.maxFiles}
	if tf.maxFiles < 0 {
		return usagef("--max-files must be positive")
	}
	if tf.maxBytes != "" {
		n, err := parseSize(tf.maxBytes)
		if err != nil {
			return usagef("--max-bytes: %v", err)
		}
		opts.MaxBytes = n
	}
	prog := newTreeProgress(c)
	opts.Progress = prog.update
	var (
		sum  *api.TreeSummary
		err  error
		dest string
	)
	switch {
	case tf.extract:
		if dstLocal {
			return usagef("--extract unpacks into a sandbox: cp --extract ARCHIVE NAME:/dir")
		}
		dest = dstName + ":" + dstPath
		sum, err = extractArchive(c, cl, pos[0], dstName, dstPath)
	case dstLocal:
		dest = dstPath
		sum, err = downloadTree(c, cl, srcName, srcPath, dstPath, opts)
	default:
		sum, dest, err = uploadTree(c, cl, srcPath, dstName, dstPath, opts)
	}
	prog.finish()
	if err != nil || sum == nil {
		return err
	}
	if c.json() {
		return c.printJSON(sum)
	}
	_, err = fmt.Fprintf(c.stdout, "copied %d files, %d directories, %d links, %d bytes to %s\n", sum.Files, sum.Dirs, sum.Links, sum.Bytes, dest)
	return err
}

func uploadTree(c *cmd, cl *client.Client, local, name, remote string, opts *client.TreeOptions) (*api.TreeSummary, string, error) {
	if local == "-" {
		return nil, "", usagef("a tree upload reads a local directory; to unpack a tar stream from standard input use cp --extract - NAME:/dir")
	}
	fi, err := os.Stat(local)
	if err != nil {
		return nil, "", err
	}
	if !fi.IsDir() {
		return nil, "", fmt.Errorf("%s is not a directory: cp -r copies directories (cp without -r copies a file)", local)
	}
	if base := filepath.Base(filepath.Clean(local)); base != "/" && base != "." && base != ".." {
		// As cp -r: an existing directory receives the tree under its own name.
		if st, err := cl.Stat(c.ctx, name, remote); err == nil && st.IsDir {
			remote = path.Join(remote, base)
		} else if err != nil && !client.IsNotFound(err) {
			return nil, "", err
		}
	}
	sum, err := cl.UploadDir(c.ctx, name, local, remote, opts)
	return sum, name + ":" + remote, err
}

func downloadTree(c *cmd, cl *client.Client, name, remote, local string, opts *client.TreeOptions) (*api.TreeSummary, error) {
	if local == "-" {
		_, err := cl.DownloadTar(c.ctx, name, remote, c.stdout)
		return nil, err
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() && path.Base(remote) != "/" {
		local = filepath.Join(local, path.Base(remote))
	}
	return cl.DownloadDir(c.ctx, name, remote, local, opts)
}

// extractArchive uploads the local tar archive (gzip-compressed or not) file to be
// unpacked into the directory remote.
func extractArchive(c *cmd, cl *client.Client, file, name, remote string) (*api.TreeSummary, error) {
	var r io.Reader = c.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		defer zr.Close()
		return cl.UploadTar(c.ctx, name, remote, zr)
	}
	return cl.UploadTar(c.ctx, name, remote, br)
}

// treeProgress shows a tree copy's counts on a terminal, at most ten times a second.
type treeProgress struct {
	w     io.Writer
	mu    sync.Mutex
	last  time.Time
	shown bool
}

func newTreeProgress(c *cmd) *treeProgress {
	if _, ok := terminalFd(c.stderr); !ok {
		return &treeProgress{}
	}
	return &treeProgress{w: c.stderr}
}

func (p *treeProgress) update(n client.TreeCount) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.shown = true
		fmt.Fprintf(p.w, "\r\033[K%s", n)
	}
}

func (p *treeProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
