package image

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// An image's config may name the user its processes run as ("1000", "1000:1000",
// "app", "app:staff"): executions that name no uid of their own run as it. Names are
// looked up in the image's own /etc/passwd and /etc/group, read from its layers through
// an os.Root each (a layer is an owner's archive: a symlink in it never leads out).

// maxAccountFile bounds how much of an image's passwd or group file is read.
const maxAccountFile = 1 << 20

// maxUserCache bounds the images whose user is remembered.
const maxUserCache = 1024

// User is the uid and gid a process in a container of the image digest runs as when
// the caller names none: the user the image's config names, or nil (root, and for an
// image gone since). It is asked on every execution, so the answer is remembered per
// digest and the image's record is read only once.
func (s *Store) User(digest string) (uid, gid *uint32, err error) {
	s.usersMu.Lock()
	ids, ok := s.users[digest]
	s.usersMu.Unlock()
	if !ok {
		img, err := s.ByDigest(digest)
		if err != nil {
			return nil, nil, nil // an image gone since: its sandbox runs as root
		}
		if ids, err = imageIDs(s.LayerDirs(img), img); err != nil {
			return nil, nil, err
		}
		s.usersMu.Lock()
		if s.users == nil || len(s.users) >= maxUserCache {
			s.users = map[string]*[2]uint32{}
		}
		s.users[digest] = ids
		s.usersMu.Unlock()
	}
	if ids == nil {
		return nil, nil, nil
	}
	u, g := ids[0], ids[1] // the caller's own copies, not the remembered ones
	return &u, &g, nil
}

// imageIDs resolves the user img's config names in its layers; nil for none (root).
func imageIDs(layers []string, img *Image) (*[2]uint32, error) {
	spec := img.Config.User
	if spec == "" {
		return nil, nil
	}
	user, group, _ := strings.Cut(spec, ":")
	u, g, err := lookupID(layers, "etc/passwd", user, 2, 3)
	if err == nil && group != "" {
		g, _, err = lookupID(layers, "etc/group", group, 2, -1)
	}
	if err != nil {
		return nil, errdefs.Precondition("the image %s runs as user %q: %v", img.Name, spec, err)
	}
	return &[2]uint32{u, g}, nil
}

// lookupID resolves name (or a number) to the id in field idField of file's line for
// it, and the id in field gidField (-1: none; then the id itself); the file is the
// topmost layer's that has one.
func lookupID(layers []string, file, name string, idField, gidField int) (uint32, uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		id := uint32(n)
		gid := id
		if gidField >= 0 { // a uid alone takes its passwd group when the image has one
			if _, g, err := lookupName(layers, file, func(f []string) bool { return f[idField] == name }, idField, gidField); err == nil {
				gid = g
			}
		}
		return id, gid, nil
	}
	return lookupName(layers, file, func(f []string) bool { return f[0] == name }, idField, gidField)
}

func lookupName(layers []string, file string, match func([]string) bool, idField, gidField int) (uint32, uint32, error) {
	for _, dir := range slices.Backward(layers) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			continue
		}
		f, err := root.Open(file)
		root.Close()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) <= max(idField, gidField) || !match(fields) {
				continue
			}
			id, err := strconv.ParseUint(fields[idField], 10, 32)
			if err != nil {
				break
			}
			gid := id
			if gidField >= 0 {
				if gid, err = strconv.ParseUint(fields[gidField], 10, 32); err != nil {
					break
				}
			}
			return uint32(id), uint32(gid), nil
		}
		return 0, 0, errors.New("not in the image's /" + file)
	}
	return 0, 0, errors.New("the image has no /" + file)
}
