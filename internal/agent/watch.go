package agent

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

// maxWatches bounds the directories one file.watch covers (a variable for tests).
var maxWatches = 8192

// watchMask is what a file.watch asks inotify for on every directory it covers.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// dirWatch is one file.watch: an inotify instance with a watch on the directory and,
// when recursive, on every directory below it.
type dirWatch struct {
	s         *server
	base      string // the watched directory, relative to the root
	ifd       int    // the inotify descriptor, owned by f
	f         *os.File
	recursive bool
	paths     map[int]string // watch descriptor → directory relative to base ("" for base)
}

// handleFileWatch streams the changes under a directory until the client hangs up or
// the directory is removed. A recursive watch puts a new directory under watch before
// it reports the directory's creation, so what happens in it after is reported too.
func (s *server) handleFileWatch(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	dfd, err := s.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == unix.ENOTDIR {
		return errdefs.Invalid("%s is not a directory: only a directory can be watched", req.Path)
	}
	if err != nil {
		return fsError(req.Path, err)
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		unix.Close(dfd)
		return errdefs.Unavailable("cannot watch files in the sandbox: inotify: %v", err)
	}
	w := &dirWatch{s: s, base: rel, ifd: ifd, f: os.NewFile(uintptr(ifd), "inotify"), recursive: req.Recursive, paths: map[int]string{}}
	defer w.f.Close()
	if err := w.add(dfd, ""); err != nil {
		return err
	}
	if fw.json(agentproto.FrameData, agentproto.WatchEvent{}) != nil {
		return nil
	}
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctl.cancel: // the client hung up: stop reading events
			_ = w.f.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	removed, err := w.loop(fw)
	switch {
	case err != nil:
		fw.error(err)
	case removed:
		_ = fw.json(agentproto.FrameResult, struct{}{})
	}
	close(stop)
	<-stopped
	c.Close()
	<-ctl.done
	return nil
}

// add watches the directory open at dfd, rel below the base, and (recursive) every
// directory below it, never following a symlink. It closes dfd.
func (w *dirWatch) add(dfd int, rel string) error {
	d := os.NewFile(uintptr(dfd), rel)
	defer d.Close()
	if len(w.paths) >= maxWatches {
		return errdefs.Quota("the watch would cover more than %d directories, the most one watch covers: watch a smaller tree", maxWatches)
	}
	wd, err := unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(dfd), watchMask)
	switch {
	case err == unix.ENOSPC:
		return errdefs.Quota("the sandbox's limit of watched directories (fs.inotify.max_user_watches) is reached")
	case err == unix.ENOENT:
		return errdefs.Unavailable("watching files needs /proc mounted in the sandbox")
	case err != nil:
		return fsError("/"+path.Join(w.base, rel), err)
	}
	w.paths[wd] = rel
	if !w.recursive {
		return nil
	}
	for {
		names, rerr := d.Readdirnames(1024)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // gone, or replaced by something else meanwhile
			}
			if err := w.add(cfd, path.Join(rel, name)); err != nil {
				return err
			}
		}
		if rerr != nil {
			return nil // io.EOF, or a directory that went away while it was read
		}
	}
}

// addNew watches a directory that appeared at rel below the base.
func (w *dirWatch) addNew(rel string) error {
	dfd, err := w.s.openat(path.Join(w.base, rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil // gone, or replaced by something else meanwhile
	}
	return w.add(dfd, rel)
}

// drop stops watching rel and the directories below it (moved away).
func (w *dirWatch) drop(rel string) {
	for wd, p := range w.paths {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			delete(w.paths, wd)
		}
	}
}

// loop sends events until the client hangs up (false, nil), the watched directory is
// removed (true, nil) or the watch fails.
func (w *dirWatch) loop(fw *frameWriter) (removed bool, err error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}
		if err != nil {
			return false, errdefs.Unavailable("reading file events: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent
			if size > n-off {
				return false, errdefs.Unavailable("reading file events: a truncated event")
			}
			name := strings.TrimRight(string(buf[off:off+size]), "\x00")
			off += size
			ev, done, err := w.event(wd, mask, name)
			if done || err != nil {
				return done, err
			}
			if ev.Op != "" && fw.json(agentproto.FrameData, ev) != nil {
				return false, nil
			}
		}
	}
}

// event turns one inotify event into the WatchEvent to send (Op "": none), keeping
// the set of watched directories up to date; done reports the watched directory gone.
func (w *dirWatch) event(wd int, mask uint32, name string) (ev agentproto.WatchEvent, done bool, err error) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		return ev, false, errdefs.Unavailable("file events were lost: more came than the watch could pass on; watch again")
	}
	dir, ok := w.paths[wd]
	if !ok {
		return ev, false, nil // a watch dropped meanwhile
	}
	root := dir == ""
	switch {
	case mask&(unix.IN_DELETE_SELF|unix.IN_UNMOUNT) != 0 && root:
		return ev, true, nil
	case mask&unix.IN_IGNORED != 0:
		delete(w.paths, wd)
		return ev, root, nil
	case name == "":
		return ev, false, nil // about a watched directory itself: reported by its parent
	}
	ev.Name = path.Join(dir, name)
	isDir := mask&unix.IN_ISDIR != 0
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		if isDir && w.recursive {
			if err := w.addNew(ev.Name); err != nil {
				return ev, false, err
			}
		}
		ev.Op = agentproto.WatchCreate
	case mask&unix.IN_MODIFY != 0:
		ev.Op = agentproto.WatchWrite
	case mask&unix.IN_DELETE != 0:
		ev.Op = agentproto.WatchRemove
	case mask&unix.IN_MOVED_FROM != 0:
		if isDir && w.recursive {
			w.drop(ev.Name)
		}
		ev.Op = agentproto.WatchRename
	case mask&unix.IN_ATTRIB != 0:
		ev.Op = agentproto.WatchChmod
	}
	return ev, false, nil
}
