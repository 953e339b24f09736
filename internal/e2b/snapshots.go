package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// E2B's forks and snapshots on Airlock's: a fork is the manager's fork of a sandbox; a
// snapshot is an Airlock snapshot, its E2B name kept as a label; a snapshot's id is a
// template that a sandbox is created from (a fork of the snapshot); deleting that
// template deletes the snapshot.

// snapshotNameLabel keeps the name E2B gave a snapshot.
const snapshotNameLabel = "e2b.name"

// maxForks bounds the forks one call makes.
const maxForks = 10

// forkResult is E2B's SandboxForkResult: one fork's sandbox, or why it failed.
type forkResult struct {
	Sandbox *sandbox  `json:"sandbox,omitempty"`
	Error   *apiError `json:"error,omitempty"`
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func toSnapshotInfo(man *manager.Snapshot) snapshotInfo {
	names := []string{}
	if n := man.Labels[snapshotNameLabel]; n != "" {
		names = append(names, n)
	}
	return snapshotInfo{SnapshotID: man.ID, Names: names}
}

// fork makes count forks of a sandbox, one after another, each with the source's
// metadata and, when asked, timeout seconds to live. If the first fails nothing was
// made and the call fails; a later one that fails is reported in its place.
func (c *Control) fork(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > maxForks {
		return errdefs.Invalid("count must be from 1 to %d, not %d", maxForks, count)
	}
	var life time.Duration
	if req.Timeout != nil {
		d, err := timeout("timeout", *req.Timeout)
		if err != nil {
			return err
		}
		life = d
	}
	src, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	out := make([]forkResult, 0, count)
	for i := range count {
		sb, err := c.forkFrom(r, p, src.ID, src.Labels, life)
		if err != nil && i == 0 {
			return err
		}
		if err != nil {
			e := c.toAPIError(r, err)
			out = append(out, forkResult{Error: &e})
			continue
		}
		s := c.toSandbox(sb, p)
		out = append(out, forkResult{Sandbox: &s})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// createFromSnapshot makes a sandbox from one of p's snapshots, named as the template:
// a fork of the snapshot, with the metadata as labels and the timeout as lifetime.
func (c *Control) createFromSnapshot(w http.ResponseWriter, r *http.Request, p *auth.Principal, req newSandbox) error {
	switch {
	case len(req.EnvVars) > 0:
		return errdefs.Invalid("envVars cannot be set with a snapshot template: a snapshot keeps the environment of the sandbox it was taken from; give a command its variables with commands.run's envs")
	case req.AutoPause:
		return errdefs.Invalid("autoPause cannot be set with a snapshot template: the sandbox keeps the idle suspension of the sandbox the snapshot was taken from")
	case req.Network != nil:
		return errdefs.Invalid("network cannot be set with a snapshot template: the sandbox keeps the egress policy of the sandbox the snapshot was taken from; change it afterwards with updateNetwork")
	case req.AllowInternetAccess != nil && !*req.AllowInternetAccess:
		return errdefs.Invalid("allow_internet_access cannot be set with a snapshot template: the sandbox keeps the egress policy of the sandbox the snapshot was taken from; change it afterwards with Airlock's API (airlock network set)")
	}
	var life time.Duration
	if req.Timeout != nil {
		d, err := timeout("timeout", *req.Timeout)
		if err != nil {
			return err
		}
		life = d
	}
	sb, err := c.forkFrom(r, p, req.TemplateID, req.Metadata, life)
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.Invalid("template %q not found: no snapshot of yours has this id (Sandbox.listSnapshots lists them)", req.TemplateID)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c.toSandbox(sb, p))
	return nil
}

// forkFrom makes a running sandbox from src (a sandbox or a snapshot) with labels and,
// when life is set, that lifetime from now. A fork whose lifetime is refused is
// terminated again.
func (c *Control) forkFrom(r *http.Request, p *auth.Principal, src string, labels map[string]string, life time.Duration) (*manager.Sandbox, error) {
	_, sb, err := c.m.Fork(r.Context(), call(p), src, manager.ForkRequest{Name: newName(), Labels: labels})
	if err != nil {
		return nil, fieldNames(err)
	}
	if life == 0 {
		return sb, nil
	}
	_, timed, err := c.m.SetLifetime(r.Context(), call(p), sb.ID, life)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
		defer cancel()
		if _, _, terr := c.m.Terminate(ctx, call(p), sb.ID); terr != nil {
			c.log.Error("terminate a fork whose lifetime was refused", "sandbox", sb.ID, "err", terr)
		}
		return nil, fieldNames(err)
	}
	return timed, nil
}

// createSnapshot snapshots a sandbox, keeping the name (if any) as a label.
func (c *Control) createSnapshot(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	var labels map[string]string
	if req.Name != "" {
		labels = map[string]string{snapshotNameLabel: req.Name}
	}
	_, man, err := c.m.Snapshot(r.Context(), call(p), sb.ID, manager.SnapshotRequest{Labels: labels})
	if err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) && errors.Is(err, errdefs.ErrInvalidArgument) {
			msg := strings.Replace(e.Msg, `value for label "`+snapshotNameLabel+`"`, "snapshot name", 1)
			return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Msg: msg, Cause: err}
		}
		return err
	}
	writeJSON(w, http.StatusCreated, toSnapshotInfo(man))
	return nil
}

// listSnapshots lists p's snapshots that are ready, oldest first: of one sandbox when
// sandboxID is given (none for a sandbox that is not p's), with a name (or id) when
// name is.
func (c *Control) listSnapshots(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"sandboxID", "name", "limit", "nextToken"}, k) {
			return errdefs.Invalid("unknown query parameter %q; use sandboxID, name, limit and nextToken", k)
		}
	}
	pg, err := pageOf(q)
	if err != nil {
		return err
	}
	sandboxID := q.Get("sandboxID")
	var all []*manager.Snapshot
	if sandboxID == "" || strings.HasPrefix(sandboxID, "sb_") {
		all, err = c.m.Snapshots(r.Context(), p.Identity, sandboxID)
		if errors.Is(err, errdefs.ErrNotFound) {
			all, err = nil, nil
		}
		if err != nil {
			return err
		}
	}
	name := q.Get("name")
	out := []snapshotInfo{}
	for _, man := range all {
		if man.State != manager.SnapshotReady || name != "" && name != man.ID && name != man.Labels[snapshotNameLabel] {
			continue
		}
		out = append(out, toSnapshotInfo(man))
	}
	writePage(w, pg, out)
	return nil
}

// deleteTemplate deletes a snapshot named as a template; Airlock keeps no other
// templates (its images are removed with its own API).
func (c *Control) deleteTemplate(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "snap_") {
		return &errdefs.Error{Class: errNotServed, Msg: fmt.Sprintf("%s %s is not served by Airlock: only a snapshot (snap_…) is deleted as a template here; templates are Airlock images, removed with Airlock's API (airlock image rm)", r.Method, r.URL.Path)}
	}
	if err := permit(p, auth.SnapshotDelete); err != nil {
		return err
	}
	if err := c.m.DeleteSnapshot(r.Context(), p.Identity, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
