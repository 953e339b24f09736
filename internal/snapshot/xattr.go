package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

const (
	opaqueXattr = "trusted.overlay.opaque"
	capsXattr   = "security.capability"
	aclAccess   = "system.posix_acl_access"
	aclDefault  = "system.posix_acl_default"
)

// resolveFlags keep every lookup below the root it starts from and refuse any symlink
// (or magic link, or mount crossing) on the way.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// atPath names entry name of the open directory dirfd as a path whose only followed
// link is the directory's own descriptor: the l* xattr calls then act on name itself,
// which need not (a symlink, a whiteout) or must not (a device) be opened.
func atPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// fdXattrs reads the xattrs of an open file or directory.
func fdXattrs(fd int) (map[string][]byte, error) {
	return readXattrs(
		func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(n string, b []byte) (int, error) { return unix.Fgetxattr(fd, n, b) })
}

// atXattrs reads the xattrs of name in dirfd, not following it.
func atXattrs(dirfd int, name string) (map[string][]byte, error) {
	p := atPath(dirfd, name)
	return readXattrs(
		func(b []byte) (int, error) { return unix.Llistxattr(p, b) },
		func(n string, b []byte) (int, error) { return unix.Lgetxattr(p, n, b) })
}

func readXattrs(list func([]byte) (int, error), get func(string, []byte) (int, error)) (map[string][]byte, error) {
	names, err := grow(list)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil || len(names) == 0 {
		return nil, err
	}
	out := map[string][]byte{}
	for _, n := range bytes.Split(bytes.TrimRight(names, "\x00"), []byte{0}) {
		name := string(n)
		v, err := grow(func(b []byte) (int, error) { return get(name, b) })
		if errors.Is(err, unix.ENODATA) {
			continue // removed since listed
		}
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// grow calls f with a buffer big enough for its answer.
func grow(f func([]byte) (int, error)) ([]byte, error) {
	n, err := f(nil)
	for err == nil {
		b := make([]byte, n)
		var m int
		if m, err = f(b); err == nil {
			return b[:m], nil
		}
		if errors.Is(err, unix.ERANGE) {
			n, err = f(nil) // it grew in between
		}
	}
	return nil, err
}

// setXattrs writes xattrs with set, shifting the ids inside them into uid base.
func setXattrs(x map[string][]byte, base uint32, set func(name string, v []byte) error) error {
	for name, v := range x {
		v, ok := shiftXattr(name, v, func(id uint32) (uint32, bool) { return base + id, id < idRange })
		if !ok {
			return errdefs.Invalid("xattr %s holds an id outside the sandbox range", name)
		}
		if err := set(name, v); err != nil {
			return err
		}
	}
	return nil
}

// nativeXattrs rewrites the ids inside xattrs from host ids of the range at base to
// container-native ones. A capability set bound to a root outside the range is dropped
// (it grants nothing inside the sandbox); an ACL id outside it reads as the overflow id.
func nativeXattrs(x map[string][]byte, base uint32) map[string][]byte {
	for name, v := range x {
		isCaps := name == capsXattr
		nv, ok := shiftXattr(name, v, func(id uint32) (uint32, bool) {
			if id-base < idRange && id >= base {
				return id - base, true
			}
			return overflowID, !isCaps
		})
		if !ok {
			delete(x, name)
			continue
		}
		x[name] = nv
	}
	return x
}

// shiftXattr maps the ids held in a file-capability (v3, with a root id) or POSIX ACL
// xattr through f, returning a new value; other xattrs are returned as they are. ok is
// false when f refuses an id.
func shiftXattr(name string, v []byte, f func(uint32) (uint32, bool)) ([]byte, bool) {
	le := binary.LittleEndian
	switch name {
	case capsXattr:
		const revMask, rev3, size3 = 0xff000000, 0x03000000, 24
		if len(v) != size3 || le.Uint32(v)&revMask != rev3 {
			return v, true
		}
		id, ok := f(le.Uint32(v[20:]))
		out := bytes.Clone(v)
		le.PutUint32(out[20:], id)
		return out, ok
	case aclAccess, aclDefault:
		const header, entry, aclUser, aclGroup = 4, 8, 0x02, 0x08
		if len(v) < header || (len(v)-header)%entry != 0 {
			return v, true
		}
		out := bytes.Clone(v)
		for off := header; off < len(out); off += entry {
			if tag := le.Uint16(out[off:]); tag != aclUser && tag != aclGroup {
				continue
			}
			id, ok := f(le.Uint32(out[off+4:]))
			if !ok {
				return nil, false
			}
			le.PutUint32(out[off+4:], id)
		}
		return out, true
	}
	return v, true
}
