package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The host image is a small generated skeleton (etc, mount points, empty home dirs) plus
// read-only bind mounts of the host's /usr (and /bin, /lib, /lib64, /sbin where those are
// real directories). Nothing is taken from the host but the files named here: never
// /root, /home, /etc/shadow, keys, or Airlock's own state.

var hostConfig = Config{
	Env:        []string{defaultPath, "HOME=/root", "LANG=C.UTF-8"},
	WorkingDir: "/root",
}

const (
	passwdFile = "root:x:0:0:root:/root:/bin/bash\n" +
		"user:x:1000:1000:user:/home/user:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	groupFile = "root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n"
	hostsFile = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	nsswitch  = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n" +
		"networks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n"
	maxCopied = 4 << 20 // a host file larger than this is not copied into the skeleton
)

// skeleton writes a deterministic tar: fixed times, no user or group names.
type skeleton struct {
	tw  *tar.Writer
	err error
}

func (k *skeleton) add(h *tar.Header, body []byte) {
	if k.err != nil {
		return
	}
	h.ModTime = time.Unix(0, 0)
	h.Format = tar.FormatPAX
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(body))
	}
	if k.err = k.tw.WriteHeader(h); k.err == nil && len(body) > 0 {
		_, k.err = k.tw.Write(body)
	}
}

func (k *skeleton) dir(name string, mode int64, owner int) {
	k.add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner}, nil)
}

func (k *skeleton) file(name string, body []byte) {
	k.add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, body)
}

func (k *skeleton) symlink(name, target string) {
	k.add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

// copy adds the host's regular file root/src (following links) as name, if it exists
// and is small; it reports whether it did.
func (k *skeleton) copy(root, src, name string) bool {
	f, err := os.Open(filepath.Join(root, src))
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxCopied {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCopied))
	if err != nil {
		return false
	}
	k.file(name, b)
	return true
}

// hostSkeleton builds the host image's skeleton layer (a tar) and its mounts from the
// host whose root directory is root.
func hostSkeleton(root string) ([]byte, []Mount, error) {
	var buf bytes.Buffer
	k := &skeleton{tw: tar.NewWriter(&buf)}
	mounts := []Mount{{Source: filepath.Join(root, "usr"), Destination: "/usr", ReadOnly: true}}
	for _, d := range []string{"bin", "lib", "lib64", "sbin"} {
		p := filepath.Join(root, d)
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				k.symlink(d, target)
			}
		case fi.IsDir():
			k.dir(d, 0o755, 0)
			mounts = append(mounts, Mount{Source: p, Destination: "/" + d, ReadOnly: true})
		}
	}
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"dev", 0o755}, {"etc", 0o755}, {"home", 0o755}, {"mnt", 0o755}, {"opt", 0o755},
		{"proc", 0o555}, {"root", 0o700}, {"run", 0o755}, {"srv", 0o755}, {"sys", 0o555},
		{"tmp", 0o1777}, {"usr", 0o755}, {"var", 0o755}, {"var/lib", 0o755}, {"var/log", 0o755},
		{"var/tmp", 0o1777},
	} {
		k.dir(d.name, d.mode, 0)
	}
	k.dir("home/user", 0o755, 1000)
	k.symlink("var/run", "/run")

	k.file("etc/passwd", []byte(passwdFile))
	k.file("etc/group", []byte(groupFile))
	k.file("etc/hosts", []byte(hostsFile))
	k.file("etc/hostname", []byte("sandbox\n"))
	k.file("etc/resolv.conf", []byte("nameserver 127.0.0.1\n"))
	k.file("etc/nsswitch.conf", []byte(nsswitch))
	k.symlink("etc/mtab", "/proc/self/mounts")
	if !k.copy(root, "etc/os-release", "etc/os-release") {
		k.copy(root, "usr/lib/os-release", "etc/os-release")
	}
	for _, f := range []string{"ld.so.cache", "ld.so.conf", "protocols", "services"} {
		k.copy(root, "etc/"+f, "etc/"+f)
	}
	if ents, err := os.ReadDir(filepath.Join(root, "etc/ld.so.conf.d")); err == nil {
		k.dir("etc/ld.so.conf.d", 0o755, 0)
		for _, e := range ents {
			if e.Type().IsRegular() {
				k.copy(root, "etc/ld.so.conf.d/"+e.Name(), "etc/ld.so.conf.d/"+e.Name())
			}
		}
	}
	k.dir("etc/ssl", 0o755, 0)
	k.dir("etc/ssl/certs", 0o755, 0)
	for _, src := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"} {
		if k.copy(root, src, "etc/ssl/certs/ca-certificates.crt") {
			k.symlink("etc/ssl/cert.pem", "certs/ca-certificates.crt")
			break
		}
	}
	if ents, err := os.ReadDir(filepath.Join(root, "etc/alternatives")); err == nil {
		k.dir("etc/alternatives", 0o755, 0)
		for _, e := range ents {
			if e.Type()&os.ModeSymlink == 0 {
				continue // only the links: they make awk, editor, pager resolve into /usr
			}
			if target, err := os.Readlink(filepath.Join(root, "etc/alternatives", e.Name())); err == nil {
				k.symlink("etc/alternatives/"+e.Name(), target)
			}
		}
	}
	if k.err == nil {
		k.err = k.tw.Close()
	}
	return buf.Bytes(), mounts, k.err
}

// usrIdentity names the host's /usr tree: its os-release and when that last changed.
func usrIdentity(root string) string {
	p := filepath.Join(root, "usr/lib/os-release")
	b, _ := os.ReadFile(p)
	var mtime int64
	if fi, err := os.Stat(p); err == nil {
		mtime = fi.ModTime().UnixNano()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]) + "@" + time.Unix(0, mtime).UTC().Format(time.RFC3339Nano)
}

// hostDigest pins the host image: skeleton, /usr identity, mounts and config. The same
// host gives the same digest on every start, so existing sandboxes keep matching.
func hostDigest(layerID, usr string, mounts []Mount) string {
	b, _ := json.Marshal(struct {
		Version string
		Layer   string
		Usr     string
		Mounts  []Mount
		Config  Config
	}{"airlock-host-v1", layerID, usr, mounts, hostConfig})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ensureHost makes the host image for the host at root current: it writes the skeleton
// and record if missing and points the public name "host" at it. The caller holds meta.lock.
func (s *Store) ensureHost(root string) error {
	tb, mounts, err := hostSkeleton(root)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(tb)
	layerID := "sha256:" + hex.EncodeToString(sum[:])
	digest := hostDigest(layerID, usrIdentity(root), mounts)
	dir := s.path("host", hexOf(digest))
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		tmp, err := os.MkdirTemp(s.path("tmp"), "host-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		staged := filepath.Join(tmp, "root")
		if err := os.Mkdir(staged, 0o700); err != nil {
			return err
		}
		if err := unpackLayer(context.Background(), bytes.NewReader(tb), staged, nil); err != nil {
			return err
		}
		if err := syncDir(staged); err != nil {
			return err
		}
		if err := os.Rename(staged, dir); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
	}
	img := &Image{
		Name: HostName, Digest: digest, Layers: []string{layerID}, Config: hostConfig,
		Mounts: mounts, Size: dirSize(dir), Created: time.Now().UTC(), Builtin: true,
	}
	if err := s.writeRecord(img); err != nil {
		return err
	}
	t, err := s.readRefs()
	if err != nil {
		return err
	}
	if i := t.find("", HostName, true); i >= 0 {
		if t.Refs[i].Digest == digest {
			return nil
		}
		t.Refs[i].Digest = digest
	} else {
		t.Refs = append(t.Refs, ref{Name: HostName, Digest: digest, Public: true})
	}
	return s.writeRefs(t)
}
