package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/client"
)

var cpVerb = &verb{
	name:  "cp",
	args:  "[-r | --extract] SRC DST",
	short: "copy a file or a directory tree into or out of a sandbox",
	long: `Exactly one of SRC and DST is NAME:/path in a sandbox; the other is a local path, or
"-" for standard input or output. An upload keeps the local file's mode. A
destination that is a directory (or ends in /) receives the file under its own name.

-r (--recursive) copies a directory tree, as one tar stream: modes, empty
directories and symbolic links are kept (links as links: never followed, so
nothing outside the tree is read or written); sockets, FIFOs and devices are
skipped. As with cp -r, a destination directory that exists receives the tree under
its own name, and one that does not becomes the copy. cp -r NAME:/dir - writes the
tree's tar stream to standard output. A download is unpacked as hostile input: an
entry with an absolute name, "..", a path through a link, a device node or FIFO, or
a hard link out of the tree is refused with the entry named, setuid and setgid bits
are dropped, and --max-files (default 500000) and --max-bytes (default 8GiB) bound
it; a refused download writes nothing outside DIR and removes a DIR it made.

--extract unpacks a local tar archive (or "-": standard input; gzip-compressed
or not) into the directory NAME:/dir, made if missing, the way -r uploads do.

On a terminal a tree copy shows its progress; it ends with a summary line.`,
	run: runCp,
}

func runCp(c *cmd, args []string) error {
	var tf treeFlags
	c.fs.BoolVar(&tf.recursive, "recursive", false, "copy a directory tree")
	c.fs.BoolVar(&tf.recursive, "r", false, "short for --recursive")
	c.fs.BoolVar(&tf.extract, "extract", false, "unpack the local tar archive SRC into the directory NAME:/dir")
	c.fs.Int64Var(&tf.maxFiles, "max-files", 0, "a tree download's most entries (default 500000)")
	c.fs.StringVar(&tf.maxBytes, "max-bytes", "", "a tree download's most bytes of files (default 8GiB)")
	pos, _, err := c.parse(args, 2, false)
	if err != nil {
		return err
	}
	srcName, srcPath, srcErr := splitRemote(pos[0])
	dstName, dstPath, dstErr := splitRemote(pos[1])
	for _, e := range []error{srcErr, dstErr} {
		if e != nil && !errors.Is(e, errLocalPath) {
			return usageError{e}
		}
	}
	srcLocal, dstLocal := srcErr != nil, dstErr != nil
	if srcLocal == dstLocal {
		return usagef("exactly one of SRC and DST must be NAME:/path in a sandbox")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if tf.recursive || tf.extract || tf.maxFiles != 0 || tf.maxBytes != "" {
		return copyTree(c, cl, &tf, pos, srcName, srcPath, dstName, dstPath, dstLocal)
	}
	if dstLocal {
		return download(c, cl, srcName, srcPath, dstPath)
	}
	return upload(c, cl, srcPath, dstName, dstPath)
}

func upload(c *cmd, cl *client.Client, local, name, remote string) error {
	var r io.Reader = c.stdin
	var mode os.FileMode
	base := ""
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: copy a tree with cp -r", local)
		}
		r, mode, base = f, fi.Mode(), filepath.Base(local)
	}
	if strings.HasSuffix(remote, "/") {
		if base == "" {
			return usagef("%s:%s names a directory; give the file's name when copying from stdin", name, remote)
		}
		remote += base
	} else if base != "" {
		if fi, err := cl.Stat(c.ctx, name, remote); err == nil && fi.IsDir {
			remote = path.Join(remote, base)
		} else if err != nil && !client.IsNotFound(err) {
			return err
		}
	}
	fi, err := cl.Upload(c.ctx, name, remote, mode, r)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(fi)
	}
	return nil
}

func download(c *cmd, cl *client.Client, name, remote, local string) (retErr error) {
	fi, err := cl.Stat(c.ctx, name, remote)
	if err != nil {
		return err
	}
	if fi.IsDir {
		return fmt.Errorf("%s:%s is a directory: copy a tree with cp -r", name, remote)
	}
	if local == "-" {
		_, err := cl.Download(c.ctx, name, remote, c.stdout)
		return err
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, path.Base(remote))
	}
	_, statErr := os.Lstat(local)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(fi.Mode&0o777))
	if err != nil {
		return err
	}
	defer func() {
		if err := f.Close(); retErr == nil && err != nil {
			retErr = err
		}
		if retErr != nil && created {
			os.Remove(local)
		}
	}()
	n, err := cl.Download(c.ctx, name, remote, f)
	if err != nil {
		return err
	}
	if c.json() {
		fi.Size = n
		return c.printJSON(fi)
	}
	return nil
}
