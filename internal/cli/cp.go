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
	args:  "SRC DST",
	short: "copy a single file into or out of a sandbox",
	long: `Exactly one of SRC and DST is NAME:/path in a sandbox; the other is a local path, or
"-" for standard input or output. cp copies single files only, not directories.
An upload keeps the local file's mode. A destination that is a directory (or ends
in /) receives the file under its own name.`,
	run: runCp,
}

func runCp(c *cmd, args []string) error {
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
			return fmt.Errorf("%s is a directory: cp copies single files only", local)
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
		return fmt.Errorf("%s:%s is a directory: cp copies single files only", name, remote)
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
