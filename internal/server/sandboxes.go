package server

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/manager"
)

func toAPISandbox(sb *manager.Sandbox) *api.Sandbox {
	out := &api.Sandbox{
		ID: sb.ID, Name: sb.Name, Owner: sb.Owner, State: string(sb.State), Image: sb.Image, ImageDigest: sb.ImageDigest, Node: sb.Node, Runtime: sb.Runtime, Role: sb.Role,
		Limits: api.Limits{CPU: sb.Limits.CPU, Memory: sb.Limits.Memory, PIDs: sb.Limits.PIDs, OpenFiles: sb.Limits.OpenFiles, Disk: sb.Limits.Disk},
		Env:    sb.Env, Labels: sb.Labels, Generation: sb.Generation, Version: sb.Version,
		CreatedAt: sb.CreatedAt, LastActivity: sb.LastActivity, ExpiresAt: sb.ExpiresAt, Failure: sb.Failure,
		IdleSuspend: sb.IdleSuspend.String(), TTL: sb.TTL.String(), Parent: sb.Parent, ForkedFrom: sb.ForkedFrom,
		Network: toAPINetwork(sb.Network), Volumes: toAPIVolumeMounts(sb),
	}
	if ws := sb.Workspace; ws != nil {
		out.Workspace = &api.Workspace{Path: ws.Path, Access: "rw"}
		if ws.ReadOnly {
			out.Workspace.Access = "ro"
		}
	}
	if !sb.SuspendedAt.IsZero() && sb.State == manager.Suspended {
		t := sb.SuspendedAt
		out.SuspendedAt = &t
	}
	if !sb.LostAt.IsZero() && sb.State == manager.Lost {
		t := sb.LostAt
		out.LostAt = &t
	}
	if !sb.FilesAt.IsZero() {
		t := sb.FilesAt
		out.FilesAt = &t
	}
	out.Persistence = &api.Persistence{Memory: "lost"}
	if manager.RuntimeKeepsMemory(sb.Runtime) {
		out.Persistence.Memory = "kept"
	}
	if ms := manager.MemoryOf(sb); ms.Kept && sb.State == manager.Suspended {
		out.Persistence.MemoryKept, out.Persistence.MemoryBytes = true, ms.Bytes
	}
	return out
}

func toAPIOperation(op *manager.Operation) api.Operation {
	o := api.Operation{ID: op.ID, Kind: op.Kind, State: op.State, SandboxID: op.SandboxID,
		CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt}
	if op.ErrorCode != "" {
		o.Error = &api.Error{Code: op.ErrorCode, Message: op.ErrorMessage}
	}
	return o
}

// opResult answers a mutating call: the operation and the sandbox, or the error (which
// names the operation when there is one).
func (s *Server) opResult(w http.ResponseWriter, r *http.Request, status int, op *manager.Operation, sb *manager.Sandbox, err error) error {
	resp, err := opAnswer(op, sb, err)
	if err != nil {
		return err
	}
	if sb != nil {
		w.Header().Set("ETag", etag(sb.Version))
	}
	writeJSON(w, status, resp)
	return nil
}

// opAnswer is what answers a mutating call: the operation and the sandbox, or the
// error, which names the operation when there is one.
func opAnswer(op *manager.Operation, sb *manager.Sandbox, err error) (*api.OperationResponse, error) {
	if err != nil {
		if op != nil {
			var e *errdefs.Error
			if d := errdefs.Details(err); d == nil {
				if errors.As(err, &e) {
					e.Details = map[string]any{"operation_id": op.ID}
				} else {
					err = &errdefs.Error{Class: errdefs.ErrInternal, Msg: "internal error", Cause: err, Details: map[string]any{"operation_id": op.ID}}
				}
			}
		}
		return nil, err
	}
	resp := &api.OperationResponse{Operation: toAPIOperation(op)}
	if sb != nil {
		resp.Sandbox = toAPISandbox(sb)
	}
	return resp, nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSandboxRequest
	var raw []byte // kept to send on, when a placement may choose another node
	if s.placing(r) {
		var err error
		if raw, err = forward.KeepBody(w, r); err != nil {
			return err
		}
	}
	c, err := s.decodeCall(w, r, &req)
	if err != nil {
		return err
	}
	if c.IfMatch != 0 {
		return errdefs.Invalid("If-Match does not apply to a create")
	}
	if err := volumesFromInside(r, req.Volumes); err != nil {
		return err
	}
	if req.Role != "" {
		if err := s.opts.Auth.MayActAs(r.Context(), principal(r), req.Role); err != nil {
			return err
		}
	}
	if raw != nil {
		if done, err := s.placeCreate(w, r, raw, req); done {
			return err
		}
	}
	var network *manager.NetworkPolicy
	if req.Network != nil {
		n := fromAPINetwork(*req.Network)
		network = &n
	}
	var ws *manager.WorkspaceRequest
	if req.Workspace != nil {
		// The host's say on who may mount what: the unix socket peer, never a token's
		// identity or a sandbox's word.
		peer := -1
		if uid, ok := r.Context().Value(peerKey).(int); ok && r.Context().Value(sandboxKey) == nil {
			peer = uid
		}
		ws = &manager.WorkspaceRequest{Path: req.Workspace.Path, Access: req.Workspace.Access, PeerUID: peer}
	}
	cr := manager.CreateRequest{Network: network,
		Name: req.Name, Image: req.Image, Pull: req.Pull, Env: req.Env, Labels: req.Labels, NodeSelector: req.NodeSelector, MaxLifetime: req.MaxLifetime,
		IdleSuspend: req.IdleSuspend, TTL: req.TTL, Runtime: req.Runtime, Role: req.Role, Workspace: ws, Volumes: fromAPIVolumeMounts(req.Volumes),
		Limits:  manager.Limits{CPU: req.Limits.CPU, Memory: req.Limits.Memory, PIDs: req.Limits.PIDs, OpenFiles: req.Limits.OpenFiles, Disk: req.Limits.Disk},
		MayPull: principal(r).Can(auth.ImageCreate),
	}
	// A caller that accepts a stream sees the pull's progress, should the image be
	// pulled: the answer turns into NDJSON events at the first step, and its last line
	// is the create's answer. Without a pull the answer is the usual one.
	var emit func(api.CreateEvent)
	if acceptsNDJSON(r) {
		cr.Progress = pullEvents(func(ev api.PullEvent) {
			if emit == nil {
				emit = ndjson[api.CreateEvent](w)
			}
			emit(api.CreateEvent{Pull: &ev})
		})
	}
	op, sb, err := s.m.Create(r.Context(), c, cr)
	if emit == nil {
		return s.opResult(w, r, http.StatusCreated, op, sb, err)
	}
	resp, err := opAnswer(op, sb, err)
	if err != nil {
		_, e := s.apiError(r, err)
		emit(api.CreateEvent{Error: &e})
		return nil
	}
	emit(api.CreateEvent{Result: resp})
	return nil
}

// acceptsNDJSON says whether the request accepts an answer of NDJSON events.
func acceptsNDJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
}

// The pages of GET /v1/sandboxes: limit=N (at most maxListLimit) answers at most N
// sandboxes and a next cursor while more may follow; after=CURSOR starts after the
// place a next names. Without limit, a request with after gets defaultListLimit,
// and one without either gets the whole list, as clients from before pages expect.
const (
	defaultListLimit = 1000
	maxListLimit     = 5000
)

// listCursor is the opaque after= of a place in list order.
func listCursor(p *manager.ListPlace) string {
	return base64.RawURLEncoding.EncodeToString([]byte(p.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + p.ID))
}

// parseListCursor reads an after= that listCursor made.
func parseListCursor(c string) (*manager.ListPlace, error) {
	bad := errdefs.Invalid("invalid after %q: pass the next of a previous page, unchanged", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	ts, id, ok := strings.Cut(string(raw), " ")
	if !ok || id == "" {
		return nil, bad
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, bad
	}
	return &manager.ListPlace{CreatedAt: t, ID: id}, nil
}

// listPage reads limit and after into f.
func listPage(q url.Values, f *manager.SandboxFilter) error {
	if a, ok := q["after"]; ok {
		p, err := parseListCursor(a[0])
		if err != nil {
			return err
		}
		f.After, f.Limit = p, defaultListLimit
	}
	if l, ok := q["limit"]; ok {
		n, err := strconv.Atoi(l[0])
		if err != nil || n < 1 || n > maxListLimit {
			return errdefs.Invalid("invalid limit %q: a whole number from 1 to %d", l[0], maxListLimit)
		}
		f.Limit = n
	}
	return nil
}

// listSandboxes lists the caller's sandboxes, or with all_owners=true, for a caller
// with the admin permission, every owner's; a page of them with limit and after.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := manager.SandboxFilter{Owner: owner(r)}
	for _, st := range q["state"] {
		f.States = append(f.States, manager.State(st))
	}
	for k := range q {
		if k != "state" && k != "label" && k != "all_owners" && k != "limit" && k != "after" {
			return errdefs.Invalid("unknown query parameter %q; use state, label, all_owners, limit and after", k)
		}
	}
	if err := listPage(q, &f); err != nil {
		return err
	}
	if all, err := s.allOwners(r, "listing every owner's sandboxes"); err != nil {
		return err
	} else if all {
		f.Owner = ""
	}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return errdefs.Invalid("invalid label filter %q: use KEY=VALUE", l)
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	limit := f.Limit
	if limit > 0 {
		f.Limit++ // one more says whether another page follows
	}
	buf := listBuffers.Get().(*[]byte)
	defer putListBuffer(buf)
	out := api.NewSandboxListWriter(*buf)
	keep := visible(r)
	var n int
	var next string
	err := s.m.View(r.Context(), f, func(sb *manager.Sandbox) error {
		if n++; limit > 0 && n > limit {
			return nil
		}
		if limit > 0 && n == limit {
			// The place of the last one the store listed, even if the caller does not
			// see it, so the next page does not list it again; used when one more follows.
			next = listCursor(manager.PlaceOf(sb))
		}
		if keep != nil && !keep(sb) {
			return nil
		}
		b, err := s.listed.json(sb)
		if err != nil {
			return err
		}
		out.AddJSON(b)
		return nil
	})
	if err != nil {
		return err
	}
	if limit <= 0 || n <= limit {
		next = ""
	}
	b, err := out.Finish(next)
	if err != nil {
		return err
	}
	*buf = b
	httpedge.WriteJSONBody(w, http.StatusOK, b)
	return nil
}

// listBuffers keep the bodies of list pages for the next: a page of 1,000 is about a
// megabyte.
var listBuffers = sync.Pool{New: func() any { return new([]byte) }}

func putListBuffer(b *[]byte) {
	if cap(*b) <= 16<<20 {
		listBuffers.Put(b)
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.m.Resolve(r.Context(), s.scope(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sb.Version))
	writeJSON(w, http.StatusOK, toAPISandbox(sb))
	return nil
}

func (s *Server) terminateSandbox(w http.ResponseWriter, r *http.Request) error {
	c, err := s.call(r)
	if err != nil {
		return err
	}
	op, sb, err := s.m.Terminate(r.Context(), c, r.PathValue("ref"))
	return s.opResult(w, r, http.StatusOK, op, sb, err)
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) error {
	op, err := s.m.Operation(r.Context(), owner(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIOperation(op))
	return nil
}

func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) error {
	c, err := s.call(r)
	if err != nil {
		return err
	}
	op, sb, err := s.m.Suspend(r.Context(), c, r.PathValue("ref"))
	return s.opResult(w, r, http.StatusOK, op, sb, err)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	c, err := s.call(r)
	if err != nil {
		return err
	}
	op, sb, err := s.m.Resume(r.Context(), c, r.PathValue("ref"))
	resp, err := opAnswer(op, sb, err)
	if err != nil {
		return err
	}
	if mv := manager.MoveOf(op); mv != nil {
		resp.Moved = &api.Move{From: mv.From, Files: mv.Files, Generation: mv.Generation, Notice: mv.Notice}
		if !mv.LostSince.IsZero() {
			resp.Moved.LostSince = &mv.LostSince
		}
	}
	if sb != nil {
		w.Header().Set("ETag", etag(sb.Version))
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
