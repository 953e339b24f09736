package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/api"
)

var imageImportVerb = &verb{
	name:  "image import",
	args:  "FILE [--name N] [--public]",
	short: "import an image archive (OCI layout or docker save, tar or tar.gz)",
	long: `The name defaults to FILE's base name without its archive extensions, lowercased
(Alpine-3.20.tar.gz becomes alpine-3.20). FILE "-" reads standard input and needs --name.
On a terminal, progress bars show the upload and then the daemon's unpacking.
The image is private to its owner (the token's owner, or "local" over the unix socket):
another owner's image of the same name is a different image and is never replaced.
--public publishes it for every owner; only administrators (the unix socket) may.`,
	run: runImageImport,
}

var imageLsVerb = &verb{
	name:  "image ls",
	args:  "",
	short: "list images",
	run:   runImageLs,
}

var imageRmVerb = &verb{
	name:  "image rm",
	args:  "REF",
	short: "remove one of your images (refused while your sandbox uses it)",
	run:   runImageRm,
}

// archiveExts are the extensions stripped from a file name to name its image.
var archiveExts = []string{".tar", ".tgz", ".gz", ".zst", ".zstd", ".xz", ".bz2", ".oci"}

// imageName derives an image name from an archive's file name.
func imageName(file string) string {
	name := filepath.Base(file)
	for trimmed := true; trimmed; {
		trimmed = false
		for _, ext := range archiveExts {
			if len(name) > len(ext) && strings.EqualFold(name[len(name)-len(ext):], ext) {
				name, trimmed = name[:len(name)-len(ext)], true
			}
		}
	}
	return strings.ToLower(name)
}

func runImageImport(c *cmd, args []string) error {
	name := c.fs.String("name", "", "image name `N` (default: from the file name)")
	public := c.fs.Bool("public", false, "publish the image for every owner (administrators only)")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	var r io.Reader = c.stdin
	size := int64(-1)
	if file := pos[0]; file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: import takes an archive file (tar or tar.gz)", file)
		}
		r, size = f, fi.Size()
		if *name == "" {
			*name = imageName(file)
		}
	}
	if *name == "" {
		return usagef("--name is required when reading the archive from stdin")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var progress func(api.ImportEvent)
	bar := &progressBar{w: c.stderr}
	if _, ok := terminalFd(c.stderr); ok {
		progress = bar.update
		r = eofReader{r: r, atEOF: bar.sent}
	}
	importImage := cl.ImportImage
	if *public {
		importImage = cl.ImportPublicImage
	}
	img, err := importImage(c.ctx, *name, r, size, progress)
	bar.finish() // the bars end before the answer is printed
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(img)
	}
	return printImages(c.stdout, []api.Image{*img})
}

func runImageLs(c *cmd, args []string) error {
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	imgs, err := cl.Images(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		if imgs == nil {
			imgs = []api.Image{}
		}
		return c.printJSON(imgs)
	}
	return printImages(c.stdout, imgs)
}

func printImages(w io.Writer, imgs []api.Image) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tDIGEST\tVISIBILITY\tOWNER\tLAYERS\tSIZE\tSHARED\tCREATED\tUSED BY")
	for _, img := range imgs {
		layers, size, shared, created := fmt.Sprint(img.Layers), formatSize(img.Size), formatSize(img.Shared), formatAge(img.Created)
		if img.Builtin {
			layers, size, shared, created = "-", "-", "-", "built in"
		}
		name, owner, vis := img.Name, img.Owner, img.Visibility
		if name == "" {
			name = img.Reference
		}
		if name == "" { // kept by digest only, for the sandboxes that run on it (as docker shows it)
			name = "<none>"
		}
		if owner == "" {
			owner = "-"
		}
		if vis == "" {
			vis = "-"
		}
		usedBy := strings.Join(img.Sandboxes, ",")
		if usedBy == "" {
			usedBy = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(name), shortDigest(img.Digest), vis, owner, layers, size, shared, created, termSafe(usedBy))
	}
	return tw.Flush()
}

func runImageRm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.RemoveImage(c.ctx, pos[0]); err != nil {
		return err
	}
	if !c.json() {
		fmt.Fprintf(c.stdout, "removed %s\n", pos[0])
	}
	return nil
}
