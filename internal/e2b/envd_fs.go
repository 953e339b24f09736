package e2b

// The filesystem service of the in-sandbox plane: envd's Filesystem RPCs over the
// sandbox's agent. Paths are resolved as envd resolves them (resolvePath); the agent
// keeps every path inside the sandbox's root. What the agent answers is the sandbox's
// to forge: the agent client under manager.Work refuses file entries, user names and watch events no real
// agent sends, and this file bounds what adds up (a listing's entries, a watcher's
// events, the agent's error messages) before it reaches a client or stays in the
// daemon's memory.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb/filesystempbconnect"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// Bounds of the filesystem service.
const (
	maxPathLen     = 4096  // the longest path a request may name (PATH_MAX)
	maxListDepth   = 32    // the deepest ListDir
	maxListEntries = 10000 // the most entries one ListDir answers
)

var _ filesystempbconnect.FilesystemHandler = (*filesystemService)(nil)

// filesystemService is the envd filesystem service. It holds the polled watchers
// (CreateWatcher): one service, and so one registry, per Control.
type filesystemService struct {
	c        *Control
	watchers watcherRegistry
}

// resolvePath resolves a path of a request as envd does: an absolute path is used as
// it is (cleaned); "", a relative path, "~" and "~/x" are relative to the home of the
// request's user.
func (t *target) resolvePath(ctx context.Context, p string) (string, error) {
	home := ""
	if !path.IsAbs(p) {
		u, err := t.lookupUser(ctx)
		if err != nil {
			return "", err
		}
		home = u.Home
	}
	return resolveIn(p, home)
}

// resolveIn resolves p (see resolvePath) against home, an absolute clean path.
// "~name", another user's home, is refused.
func resolveIn(p, home string) (string, error) {
	if len(p) > maxPathLen || strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("a path is at most %d bytes, without NUL bytes", maxPathLen)
	}
	switch {
	case path.IsAbs(p):
		return path.Clean(p), nil
	case p == "~" || strings.HasPrefix(p, "~/"):
		p = p[1:]
	case strings.HasPrefix(p, "~"):
		return "", errdefs.Invalid("path %.64q names another user's home; only ~ and ~/ (the home of the request's user) are expanded", p)
	}
	return path.Join(home, p), nil
}

// lookupUser returns the request's user as the sandbox knows it, its home checked, and
// settles t.user: a request that names no user is DefaultUser's, as in E2B, or, in a
// sandbox without that account, the sandbox's default user's. It asks the agent once
// a request (twice for that fallback).
func (t *target) lookupUser(ctx context.Context) (*agentproto.UserInfo, error) {
	t.userMu.Lock()
	defer t.userMu.Unlock()
	if t.userInfo != nil {
		u := *t.userInfo
		return &u, nil
	}
	name := t.user
	if name == "" {
		name = DefaultUser
	}
	u, err := t.wk.LookupUser(ctx, name)
	if err != nil && t.user == "" && errors.Is(agentErr(err), errdefs.ErrNotFound) {
		name = "" // an image without DefaultUser: the sandbox's own default user
		u, err = t.wk.LookupUser(ctx, name)
	}
	if err != nil {
		return nil, agentErr(err)
	}
	t.user = name
	if u.Home == "" || u.Home[0] != '/' || len(u.Home) > maxPathLen || strings.IndexByte(u.Home, 0) >= 0 {
		return nil, fmt.Errorf("%w: the sandbox's agent gave user %.64q the home %.64q", agentproto.ErrBadReply, t.user, u.Home)
	}
	u.Home = path.Clean(u.Home)
	kept := *u
	t.userInfo = &kept
	return u, nil
}

// mkdirAs makes directory p and its missing parents, owned by the request's user, as
// envd makes them.
func (t *target) mkdirAs(ctx context.Context, p string) error {
	u, err := t.lookupUser(ctx)
	if err != nil {
		return err
	}
	if err := t.wk.Mkdir(ctx, p, true, int(u.UID), int(u.GID)); err != nil {
		return agentErr(err)
	}
	return nil
}

// agentErr turns a failed agent call into the error it stands for (manager.AgentError),
// with the agent's message clipped (it comes from the sandbox); any other error is
// left as it is, for the log.
func agentErr(err error) error {
	mapped, ok := manager.AgentError(err)
	if !ok {
		return err
	}
	var e *errdefs.Error
	if errors.As(mapped, &e) {
		e.Msg = audit.Clip(e.Msg) // the sandbox's text
	}
	return mapped
}

// stat describes the file at the absolute path p.
func (t *target) stat(ctx context.Context, p string) (*filesystempb.EntryInfo, error) {
	fi, err := t.wk.Stat(ctx, p)
	if err != nil {
		return nil, agentErr(err)
	}
	return entryInfo(p, fi), nil
}

// entryInfo describes fi, the file at the absolute path p, as envd does.
func entryInfo(p string, fi *agentproto.FileInfo) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{
		Name:         path.Base(p),
		Type:         fileType(fi),
		Path:         p,
		Size:         fi.Size,
		Mode:         fi.Mode & 0o777,
		Permissions:  permissions(fi),
		Owner:        fi.Owner,
		Group:        fi.Group,
		ModifiedTime: timestamppb.New(time.Unix(fi.MTime, 0)),
	}
	// The agent's stat follows a symlink and names its target; a listing describes
	// the link itself.
	if target := fi.Target; target != "" {
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target) // envd answers an absolute path
		}
		e.SymlinkTarget = &target
	}
	return e
}

func fileType(fi *agentproto.FileInfo) filesystempb.FileType {
	switch {
	case fi.IsSymlink:
		return filesystempb.FileType_FILE_TYPE_SYMLINK
	case fi.IsDir:
		return filesystempb.FileType_FILE_TYPE_DIRECTORY
	}
	return filesystempb.FileType_FILE_TYPE_FILE
}

// permissions writes fi's type and mode as Go's fs.FileMode does ("drwxr-xr-x"),
// which is what envd answers.
func permissions(fi *agentproto.FileInfo) string {
	m := fs.FileMode(fi.Mode & 0o777)
	if fi.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if fi.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if fi.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch {
	case fi.IsSymlink:
		m |= fs.ModeSymlink
	case fi.IsDir:
		m |= fs.ModeDir
	}
	return m.String()
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	t := targetOf(ctx)
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := t.stat(ctx, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: e}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	t := targetOf(ctx)
	depth := max(req.Msg.GetDepth(), 1)
	if depth > maxListDepth {
		return nil, errdefs.Invalid("depth %d is more than %d, the deepest a listing goes", depth, maxListDepth)
	}
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := t.wk.Stat(ctx, p)
	if err != nil {
		return nil, agentErr(err)
	}
	if !fi.IsDir {
		return nil, errdefs.Invalid("%s is not a directory", p)
	}
	out := &filesystempb.ListDirResponse{}
	if err := t.list(ctx, p, int(depth), &out.Entries); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// list appends to out the entries of the directory dir and, down to depth levels, of
// its subdirectories, each directory's entries followed by its own (as a walk of the
// tree visits them). Symlinked directories are not followed.
func (t *target) list(ctx context.Context, dir string, depth int, out *[]*filesystempb.EntryInfo) error {
	fis, err := t.wk.List(ctx, dir)
	if err != nil {
		return agentErr(err)
	}
	for i := range fis {
		if len(*out) == maxListEntries {
			return errdefs.Invalid("the listing holds more than %d entries, the most one answers; list a smaller depth or a subdirectory", maxListEntries)
		}
		p := path.Join(dir, fis[i].Name)
		*out = append(*out, entryInfo(p, &fis[i]))
		if depth > 1 && fis[i].IsDir && !fis[i].IsSymlink {
			err := t.list(ctx, p, depth-1, out)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) { // one removed meanwhile is skipped
				return err
			}
		}
	}
	return nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	t := targetOf(ctx)
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	switch fi, err := t.wk.Stat(ctx, p); {
	case err == nil && fi.IsDir:
		return nil, errdefs.Exists("directory %s already exists", p)
	case err == nil:
		return nil, errdefs.Invalid("%s already exists and is not a directory", p)
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, agentErr(err)
	}
	if err := t.mkdirAs(ctx, p); err != nil {
		return nil, err
	}
	e, err := t.stat(ctx, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: e}), nil
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	t := targetOf(ctx)
	from, err := t.resolvePath(ctx, req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	to, err := t.resolvePath(ctx, req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	// As envd does, the destination's missing parents are made first.
	if err := t.mkdirAs(ctx, path.Dir(to)); err != nil {
		return nil, err
	}
	if err := t.wk.Rename(ctx, from, to); err != nil {
		return nil, agentErr(err)
	}
	e, err := t.stat(ctx, to)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: e}), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	t := targetOf(ctx)
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	// As envd does, removing what is not there succeeds.
	if err := t.wk.Remove(ctx, p, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, agentErr(err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// watchSource is a watch of the agent (*manager.Watch), whose events are checked: each
// names a clean path below the watched directory.
type watchSource interface {
	Next() (agentproto.WatchEvent, error)
	Close() error
}

// startWatch checks that p is a directory and starts the agent's watch of it.
func (t *target) startWatch(ctx context.Context, p string, recursive bool) (watchSource, error) {
	fi, err := t.wk.Stat(ctx, p)
	if err != nil {
		return nil, agentErr(err)
	}
	if !fi.IsDir {
		return nil, errdefs.Invalid("%s is not a directory; only directories are watched", p)
	}
	w, err := t.wk.Watch(ctx, p, recursive)
	if err != nil {
		return nil, agentErr(err)
	}
	return w, nil
}

// eventTypes maps the agent's event ops to envd's event types.
var eventTypes = map[string]filesystempb.EventType{
	agentproto.WatchCreate: filesystempb.EventType_EVENT_TYPE_CREATE,
	agentproto.WatchWrite:  filesystempb.EventType_EVENT_TYPE_WRITE,
	agentproto.WatchRemove: filesystempb.EventType_EVENT_TYPE_REMOVE,
	agentproto.WatchRename: filesystempb.EventType_EVENT_TYPE_RENAME,
	agentproto.WatchChmod:  filesystempb.EventType_EVENT_TYPE_CHMOD,
}

// fsEvent turns an event of the agent's watch of dir into envd's, with the entry it
// names when withEntry and it still exists; nil for an op this plane does not know.
func (t *target) fsEvent(ctx context.Context, dir string, ev agentproto.WatchEvent, withEntry bool) *filesystempb.FilesystemEvent {
	typ, ok := eventTypes[ev.Op]
	if !ok {
		return nil
	}
	fe := &filesystempb.FilesystemEvent{Name: ev.Name, Type: typ}
	if withEntry {
		fe.Entry, _ = t.stat(ctx, path.Join(dir, ev.Name)) // gone again: no entry
	}
	return fe
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	t := targetOf(ctx)
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := t.startWatch(ctx, p, req.Msg.GetRecursive())
	if err != nil {
		return err
	}
	events, stop := receive(w.Next, func(agentproto.WatchEvent) bool { return false }, w.Close)
	defer stop()
	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-keepAlive.C:
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case r := <-events:
			if errors.Is(r.err, io.EOF) {
				return nil // the agent ended the watch
			}
			if r.err != nil {
				return agentErr(r.err)
			}
			fe := t.fsEvent(ctx, p, r.v, req.Msg.GetIncludeEntry())
			if fe == nil {
				continue
			}
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
				return err
			}
			keepAlive.Reset(keepAliveEvery)
		}
	}
}

type watchRecv = received[agentproto.WatchEvent]

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	t := targetOf(ctx)
	p, err := t.resolvePath(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := s.watchers.reserve(t.id); err != nil {
		return nil, err
	}
	// The watch outlives this call: it ends when the watcher is removed.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	src, err := t.startWatch(wctx, p, req.Msg.GetRecursive())
	if err != nil {
		cancel()
		s.watchers.release(t.id)
		return nil, err
	}
	withEntry := req.Msg.GetIncludeEntry()
	id := s.watchers.add(t.id, t.owner, src, cancel, func(ev agentproto.WatchEvent) *filesystempb.FilesystemEvent {
		return t.fsEvent(wctx, p, ev, withEntry)
	})
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// hdrEventsLost, on an answer of GetWatcherEvents, counts the events dropped since the
// previous poll because the watcher's buffer was full.
const hdrEventsLost = "Airlock-Events-Lost"

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	t := targetOf(ctx)
	events, lost, err := s.watchers.poll(t.id, t.owner, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	res := connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: events})
	if lost > 0 {
		res.Header().Set(hdrEventsLost, strconv.Itoa(lost))
	}
	return res, nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	t := targetOf(ctx)
	if err := s.watchers.removeID(t.id, t.owner, req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
