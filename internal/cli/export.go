package cli

import (
	"fmt"
	"os"
	"path/filepath"
)

var imageExportVerb = &verb{
	name:  "image export",
	args:  "REF [--file FILE]",
	short: "write an image to an archive that imports again with the same digest",
	long: `A pulled image, or one imported from an OCI layout, is written as an OCI image layout
that also carries docker save's manifest.json, so docker load, podman load and
airlock image import all take it; an image imported from a docker save archive or a
plain rootfs tarball is written back in that form. Importing the archive on another
node gives the same digest, which is how images reach air-gapped nodes.
--file FILE writes the archive to FILE (made whole or not at all); without it the
archive goes to standard output, which must not be a terminal.`,
	run: runImageExport,
}

func runImageExport(c *cmd, args []string) error {
	out := c.fs.String("file", "", "write the archive to `FILE` instead of standard output")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	ref := pos[0]
	if *out == "" {
		if _, tty := terminalFd(c.stdout); tty {
			return usagef("refusing to write an image archive to a terminal: give --file FILE or redirect standard output")
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if *out == "" {
		_, err := cl.ExportImage(c.ctx, ref, c.stdout)
		return err
	}
	// Written beside FILE and renamed over it once whole: an export that fails leaves
	// FILE as it was.
	f, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := cl.ExportImage(c.ctx, ref, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), *out)
	}
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(map[string]any{"image": ref, "file": *out, "bytes": n})
	}
	fmt.Fprintf(c.stderr, "exported %s to %s (%s)\n", ref, *out, formatSize(n))
	return nil
}
