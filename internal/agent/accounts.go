package agent

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strconv"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

// The sandbox's users and groups come from /etc/passwd and /etc/group under the agent's
// root, read afresh by each call that needs them. Those files are the sandbox's to
// write: at most maxAccountFile bytes of each are read, a line longer than
// maxAccountLine is skipped, a name longer than maxAccountName is ignored (its number
// stands in for it), and a call keeps only the lines it asks about.
const (
	maxAccountFile = 4 << 20
	maxAccountLine = 8 << 10
	maxAccountName = 256
)

// account is one line of /etc/passwd (or, with home empty, of /etc/group).
type account struct {
	name     string
	uid, gid uint32
	home     string
}

// eachAccount calls fn for every well-formed line of the passwd (fields name:pw:uid:
// gid:gecos:home:shell) or group (name:pw:gid:members) file at rel, relative to the
// root, until fn returns false. A file that is missing, is no regular file or is one
// of the kernel's (procfs, sysfs) reads as empty.
func (s *server) eachAccount(rel string, passwd bool, fn func(account) bool) {
	fd, err := s.openat(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	var fs unix.Statfs_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		unix.Fstatfs(fd, &fs) != nil || fs.Type == unix.PROC_SUPER_MAGIC || fs.Type == unix.SYSFS_MAGIC {
		return
	}
	parseAccounts(io.LimitReader(f, maxAccountFile), passwd, fn)
}

// parseAccounts calls fn for every well-formed line of a passwd or group file read
// from r, until fn returns false.
func parseAccounts(r io.Reader, passwd bool, fn func(account) bool) {
	want := 4
	if passwd {
		want = 7
	}
	br := bufio.NewReaderSize(r, maxAccountLine)
	for {
		line, err := br.ReadSlice('\n')
		for err == bufio.ErrBufferFull { // too long: skip to the next line
			line = nil
			_, err = br.ReadSlice('\n')
		}
		if a, ok := parseAccount(bytes.TrimSuffix(line, []byte("\n")), want); ok && !fn(a) {
			return
		}
		if err != nil {
			return
		}
	}
}

func parseAccount(line []byte, want int) (account, bool) {
	f := bytes.Split(line, []byte(":"))
	if len(f) < want || len(f[0]) == 0 || len(f[0]) > maxAccountName || f[0][0] == '+' || f[0][0] == '-' {
		return account{}, false
	}
	id, err := strconv.ParseUint(string(f[2]), 10, 32)
	if err != nil {
		return account{}, false
	}
	a := account{name: string(f[0]), uid: uint32(id), gid: uint32(id)}
	if want == 7 {
		gid, err := strconv.ParseUint(string(f[3]), 10, 32)
		if err != nil {
			return account{}, false
		}
		a.gid, a.home = uint32(gid), string(f[5])
	}
	return a, true
}

// userNamed finds a user of the sandbox by name.
func (s *server) userNamed(name string) (account, error) {
	var found *account
	s.eachAccount("etc/passwd", true, func(a account) bool {
		if a.name == name {
			found = &a
		}
		return found == nil
	})
	if found == nil {
		return account{}, errdefs.NotFound("no user %q in the sandbox", name)
	}
	return *found, nil
}

// runAs makes l run as the sandbox user name: with its uid and gid (unless they are the
// agent's own), its HOME, USER and LOGNAME, and, when l names no working directory, in
// its home if that is a directory, else in "/".
func (s *server) runAs(name string, l *launch) error {
	a, err := s.userNamed(name)
	if err != nil {
		return err
	}
	l.env = mergeEnv(l.env, []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name})
	if a.uid != uint32(os.Geteuid()) || a.gid != uint32(os.Getegid()) {
		l.uid, l.gid = &a.uid, &a.gid
	}
	if l.dir == "" {
		l.dir = "/"
		if fi, err := os.Stat(a.home); err == nil && fi.IsDir() && a.home != "" {
			l.dir = a.home
		}
	}
	return nil
}

// defaultUser is the user the agent runs processes as when a call names none: its own,
// with the home /etc/passwd gives it, else the base environment's HOME, else "/".
func (s *server) defaultUser() account {
	uid := uint32(os.Geteuid())
	a := account{name: strconv.FormatUint(uint64(uid), 10), uid: uid, gid: uint32(os.Getegid())}
	found := false
	s.eachAccount("etc/passwd", true, func(p account) bool {
		if p.uid == uid {
			a.name, a.home, found = p.name, p.home, true
		}
		return !found
	})
	if a.home == "" {
		a.home = envValue(s.opts.Env, "HOME")
	}
	if a.home == "" {
		a.home = "/"
	}
	return a
}

func (s *server) handleUserLookup(fw *frameWriter, name string) error {
	a := s.defaultUser()
	if name != "" {
		var err error
		if a, err = s.userNamed(name); err != nil {
			return err
		}
	}
	return fw.json(agentproto.FrameResult, agentproto.UserInfo{Name: a.name, UID: a.uid, GID: a.gid, Home: a.home})
}

// nameOwners sets the Owner and Group of each entry: the names the sandbox's
// /etc/passwd and /etc/group give its UID and GID (the first line of a number wins, as
// with getpwuid), or the numbers as text.
func (s *server) nameOwners(fis []agentproto.FileInfo) {
	users, groups := map[uint32]string{}, map[uint32]string{}
	for _, fi := range fis {
		users[fi.UID], groups[fi.GID] = "", ""
	}
	for _, f := range []struct {
		rel    string
		passwd bool
		names  map[uint32]string
	}{{"etc/passwd", true, users}, {"etc/group", false, groups}} {
		left := len(f.names)
		s.eachAccount(f.rel, f.passwd, func(a account) bool {
			id := a.gid
			if f.passwd {
				id = a.uid
			}
			if n, ok := f.names[id]; ok && n == "" {
				f.names[id] = a.name
				left--
			}
			return left > 0
		})
	}
	for i := range fis {
		fis[i].Owner, fis[i].Group = idName(users, fis[i].UID), idName(groups, fis[i].GID)
	}
}

// idName returns the name of id in m, or the number as text.
func idName(m map[uint32]string, id uint32) string {
	if n := m[id]; n != "" {
		return n
	}
	return strconv.FormatUint(uint64(id), 10)
}
