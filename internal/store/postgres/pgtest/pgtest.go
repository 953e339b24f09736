// Package pgtest starts throwaway PostgreSQL servers for tests: the store's own
// conformance tests, and tests of several nodes that share one database. It owns each
// server it starts (its data directory, its process) and nothing else: it never
// touches a server it did not start, and stops its own by pid.
//
// A server runs the host's PostgreSQL binaries (Debian's postgresql package puts them
// in /usr/lib/postgresql/VERSION/bin) on a free loopback port (and, with StartOn, on
// one more address of the host, for nodes in network namespaces of their own), with
// password authentication over TCP, as the postgres user when the test runs as root (initdb and
// postgres refuse to run as root). Without the binaries a test is skipped, or fails in
// CI (CI=true).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is the superuser of a test server.
const User = "airlock"

// Server is one running test server.
type Server struct {
	dir      string
	lock     *os.File // held while the test process lives; see sweep
	port     int
	password string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has been waited for
	waitErr  error
	nextDB   atomic.Int64
	// on is the prefix whose address (besides loopback) the server listens on and
	// whose hosts it lets in; invalid for loopback only.
	on netip.Prefix
}

// binDir returns the directory holding initdb and postgres: the highest version under
// /usr/lib/postgresql, else the directory of postgres on PATH.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && isExec(filepath.Join(filepath.Dir(p), "initdb")) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("needs PostgreSQL's initdb and postgres (apt-get install -y postgresql)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// skip skips the test with why, or fails it in CI.
func skip(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

// Start initialises and starts a server in a new temporary directory, and registers
// its stop (by pid) and the directory's removal with tb.Cleanup, so both happen even
// when the test fails. The process also gets SIGKILL should the test process die
// without cleaning up.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartOn(tb, netip.Prefix{})
}

// StartOn is Start with the server also listening on on's address, which must be an
// address of this host, and letting in (with the password) clients from on's hosts;
// DSN then names that address. An invalid on is loopback only, as Start.
func StartOn(tb testing.TB, on netip.Prefix) *Server {
	tb.Helper()
	bin, err := binDir()
	if err != nil {
		skip(tb, err.Error())
	}
	cred, err := credential()
	if err != nil {
		skip(tb, err.Error())
	}
	sweep()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{dir: dir, password: rand.Text(), on: on}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("remove the test server's directory: %v", err)
		}
		if s.lock != nil {
			s.lock.Close()
		}
	})
	if s.lock, err = lockDir(dir); err != nil {
		tb.Fatal(err)
	}
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	if cred != nil {
		for _, p := range []string{dir, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := s.command(bin, "initdb", cred, "-D", data, "-U", User, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	if on.IsValid() {
		hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = fmt.Fprintf(hba, "host all all %s scram-sha-256\n", on.Masked())
			err = errors.Join(err, hba.Close())
		}
		if err != nil {
			tb.Fatalf("let %s in: %v", on, err)
		}
	}
	// The port is free when chosen; another process may take it before the server
	// binds it, so a server that fails to start is tried again on another port.
	for attempt := 1; ; attempt++ {
		err := s.start(tb, bin, cred, data)
		if err == nil {
			return s
		}
		if attempt == 3 {
			tb.Fatalf("start the test PostgreSQL server: %v\n%s", err, s.logTail())
		}
	}
}

// dirPrefix starts the name of every test server's directory in the temporary directory.
const dirPrefix = "airlock-pgtest-"

// lockName is a file in a server's directory that its test process holds an flock on
// for as long as it lives: a test process killed without its cleanups (go test's
// -timeout) leaves the directory unlocked, and the next Start removes it. (Its server
// died with it: SIGKILL on the parent's death.)
const lockName = "owner.lock"

// lockDir takes the lock of dir for this process. The file is locked under another
// name and then renamed, so a sweep never finds it unlocked.
func lockDir(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweep removes the directories of test servers whose test process is gone: those
// whose lock file nobody holds. A directory without a lock file (one being made right
// now) is left alone.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(dir)
		}
		f.Close()
	}
}

// credential returns the postgres user's when the test runs as root, nil otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("runs initdb and postgres as the postgres user when root, and there is none")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// command returns bin/name args, run as cred (if set) in s.dir.
func (s *Server) command(bin, name string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "HOME=" + s.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// start runs the server on a free port and waits until it accepts connections; on
// failure it has stopped the process.
func (s *Server) start(tb testing.TB, bin string, cred *syscall.Credential, data string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.Create(filepath.Join(s.dir, "log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	listen := "127.0.0.1"
	if s.on.IsValid() {
		listen += "," + s.on.Addr().String()
	}
	cmd := s.command(bin, "postgres", cred, "-D", data, "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses="+listen, "-c", "max_connections=300",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			conn.Close(ctx)
			tb.Cleanup(s.stop(tb))
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited: %v", s.waitErr)
		case <-ctx.Done():
			s.stop(tb)()
			return fmt.Errorf("postgres did not accept connections in time: %v", err)
		case <-tick.C:
		}
	}
}

// stop returns a function that stops the server by its pid: a fast shutdown
// (SIGINT), then SIGKILL if it is still there after a while.
func (s *Server) stop(tb testing.TB) func() {
	cmd, exited := s.cmd, s.exited
	return func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
			return
		case <-time.After(30 * time.Second):
		}
		tb.Errorf("the test PostgreSQL server (pid %d) did not stop on SIGINT; killing it", cmd.Process.Pid)
		cmd.Process.Kill()
		<-exited
	}
}

// logTail returns the end of the server's log.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// Password is the password of User.
func (s *Server) Password() string { return s.password }

// DSN returns the URL that reaches database db as User, password included: at the
// address StartOn was given, else on loopback.
func (s *Server) DSN(db string) string {
	host := "127.0.0.1"
	if s.on.IsValid() {
		host = s.on.Addr().String()
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(User, s.password),
		Host: net.JoinHostPort(host, strconv.Itoa(s.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase creates a new, empty database and returns its DSN.
func (s *Server) CreateDatabase(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := fmt.Sprintf("t%d_%s", s.nextDB.Add(1), hex.EncodeToString(b))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		tb.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	return s.DSN(name)
}

// Dir is the server's directory (its data directory and log are inside).
func (s *Server) Dir() string { return s.dir }
