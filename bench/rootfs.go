package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The peers run on copies of the host image's skeleton layer, made once per run in the
// bench's work directory. Only the skeleton is copied (a few dozen small files); /usr
// is either bind-mounted as Airlock does, or, for the minimal root filesystem shared by
// runc and podman, reduced to /usr/bin/true and the libraries ldd names.

// copyTree copies the directory tree src to dst (which must not exist), keeping modes
// and owners. It copies regular files, directories and symbolic links only.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(p, target); err != nil {
				return err
			}
		default:
			return nil // devices, sockets: none in a skeleton
		}
		return setOwnerMode(target, fi)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// setOwnerMode gives p the owner and permission bits of fi (chown first: it clears
// set-id bits).
func setOwnerMode(p string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", p)
	}
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return os.Chmod(p, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid))
}

// shiftOwners adds base to every uid and gid under root, as the idmapped mounts of an
// Airlock sandbox make the image appear to the sandbox's user namespace.
func shiftOwners(root string, base uint32) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if err := os.Lchown(p, int(st.Uid+base), int(st.Gid+base)); err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		return os.Chmod(p, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid))
	})
}

// lddPaths returns bin followed by the shared objects ldd says it loads.
func lddPaths(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	paths := []string{bin}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				paths = append(paths, w)
			}
		}
	}
	return paths, sc.Err()
}

// addHostFile copies the host file p into root at the same path, resolving directories
// through root's own links (bin -> usr/bin and the like) and recreating each link that
// the file itself goes through.
func addHostFile(root, p string) error {
	for range 16 {
		dir, err := resolveIn(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if err := mkdirAllLike(root, dir); err != nil {
			return err
		}
		hostPath := filepath.Join(dir, filepath.Base(p))
		fi, err := os.Lstat(hostPath)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, hostPath)
		_, statErr := os.Lstat(dst)
		if fi.Mode()&fs.ModeSymlink == 0 {
			if statErr == nil {
				return nil // already there
			}
			if err := copyFile(hostPath, dst); err != nil {
				return err
			}
			return setOwnerMode(dst, fi)
		}
		link, err := os.Readlink(hostPath)
		if err != nil {
			return err
		}
		if statErr != nil {
			if err := os.Symlink(link, dst); err != nil {
				return err
			}
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(dir, link)
		}
		p = link
	}
	return fmt.Errorf("%s: too many links", p)
}

// resolveIn resolves the absolute directory path dir component by component, following
// the symbolic links found under root (not the host's), and returns it absolute.
func resolveIn(root, dir string) (string, error) {
	out := "/"
	parts := strings.Split(strings.Trim(dir, "/"), "/")
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		if part == "" || part == "." {
			continue
		}
		next := filepath.Join(out, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			out = next // a real directory, or one the skeleton lacks (made later)
			continue
		}
		if hops++; hops > 16 {
			return "", fmt.Errorf("%s: too many links", dir)
		}
		link, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(link) {
			out = "/"
		}
		parts = append(strings.Split(strings.Trim(link, "/"), "/"), parts...)
	}
	return out, nil
}

// mkdirAllLike makes the directory dir under root, each missing level with the mode and
// owner of the host's directory of the same path.
func mkdirAllLike(root, dir string) error {
	cur := "/"
	for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		dst := filepath.Join(root, cur)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		fi, err := os.Stat(cur)
		if err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		if err := setOwnerMode(dst, fi); err != nil {
			return err
		}
	}
	return nil
}

// writeTar writes the tree under root as a tar stream, with numeric owners and no names.
func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
