package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	Argv    []string
	Shell   string
	Env     map[string]string
	Cwd     string
	UID     *uint32
	GID     *uint32
	Timeout string
	Stdin   io.Reader // nil: no stdin
	// MaxRead bounds the output read from the sandbox (0: none); past it the command is
	// stopped. A call whose output is not streamed to its client sets it.
	MaxRead int64
}

// agentOf returns a client for a running sandbox's agent and counts the call as inbound
// traffic. Every exec, session and file call comes through here, and every connection
// the client holds open counts as work in progress (see beginWork).
func (m *Manager) agentOf(ctx context.Context, owner, ref string) (*agent.Client, *store.Sandbox, error) {
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return nil, nil, err
	}
	return m.agentFor(ctx, sb)
}

// ByID finds sandbox id whoever owns it, without resuming it. It is for a caller whose
// right to the sandbox does not come from naming it as its owner (a credential the node
// made for that sandbox), which must check that right against the record's owner
// before it acts; it then acts through Agent as that owner.
func (m *Manager) ByID(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	m.overlayActivity(sb)
	return sb, nil
}

// ErrNoRangedRead is the agent client's answer when a sandbox's agent cannot send part
// of a file (it predates ranged reads): nothing was sent, and the whole file can be.
var ErrNoRangedRead = agent.ErrNoRangedRead

func (m *Manager) agentFor(ctx context.Context, sb *store.Sandbox) (_ *agent.Client, _ *store.Sandbox, err error) {
	m.touch(sb.ID)
	if sb, err = m.ensureRunning(ctx, sb); err != nil {
		return nil, sb, err
	}
	return m.agentClient(sb), sb, nil
}

// agentClient is a client for sb's agent; every connection it holds open counts as work
// in progress (see beginWork).
func (m *Manager) agentClient(sb *store.Sandbox) *agent.Client {
	dial := m.watchClient(sb).Dial
	return &agent.Client{Dial: func(ctx context.Context) (net.Conn, error) {
		conn, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		if kc, ok := conn.(agent.KeptConn); ok {
			return &keptWorkConn{KeptConn: kc, end: m.beginWork(sb.ID)}, nil
		}
		return &workConn{Conn: conn, end: m.beginWork(sb.ID)}, nil
	}}
}

// keptWorkConn is a kept agent connection that counts as work in progress until it is
// closed or handed back for a later call.
type keptWorkConn struct {
	agent.KeptConn
	end func()
}

func (c *keptWorkConn) Close() error {
	c.end()
	return c.KeptConn.Close()
}

func (c *keptWorkConn) Keep() {
	c.end()
	c.KeptConn.Keep()
}

// watchClient is a client for sb's agent whose connections do not count as work in
// progress: a call that only waits for a process to end keeps no sandbox awake.
func (m *Manager) watchClient(sb *store.Sandbox) *agent.Client {
	id, drv := sb.ID, m.driver(sb)
	return &agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return drv.DialAgent(ctx, id) }}
}

// workConn is an agent connection that counts as work in progress until it is closed.
type workConn struct {
	net.Conn
	end func()
}

func (c *workConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// Exec runs a command to completion, streaming its output to stdout and stderr.
func (m *Manager) Exec(ctx context.Context, owner, ref string, req ExecRequest, stdout, stderr io.Writer) (*agentproto.ExitResult, error) {
	defer func(t0 time.Time) { m.metrics.Exec(time.Since(t0)) }(time.Now())
	timeout, err := parseTimeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	if len(req.Argv) == 0 && req.Shell == "" {
		// Nothing named: the image's own command (entrypoint and cmd), as docker runs it.
		sb, err := m.Resolve(ctx, owner, ref)
		if err != nil {
			return nil, err
		}
		if img, ierr := m.images.ByDigest(sb.ImageDigest); ierr == nil {
			req.Argv = append(slices.Clone(img.Config.Entrypoint), img.Config.Cmd...)
		}
		if len(req.Argv) == 0 {
			return nil, errdefs.Invalid("nothing to run: give argv or shell (the sandbox's image names no entrypoint or cmd)")
		}
	}
	env := sortedEnv(req.Env)
	cl, sb, err := m.prepare(ctx, owner, ref, req.Cwd, &env, &req.UID, &req.GID)
	if err != nil {
		return nil, err
	}
	spec := agentproto.ExecSpec{
		Argv: req.Argv, Shell: req.Shell, Env: env, Cwd: req.Cwd,
		UID: req.UID, GID: req.GID, TimeoutMS: timeout.Milliseconds(), Stdin: req.Stdin != nil,
	}
	cl.MaxRead = req.MaxRead
	before, berr := m.limitCounts(ctx, sb)
	sum := sha256.New() // the audit log keeps a checksum of the output, never the output
	start := m.now()
	res, err := cl.Exec(ctx, spec, req.Stdin, io.MultiWriter(stdout, sum), io.MultiWriter(stderr, sum))
	if err != nil {
		err = m.agentFailed(sb, err)
		m.auditExec(ctx, owner, sb, req, nil, start, sum, err)
		return nil, err
	}
	if after, err := m.limitCounts(context.WithoutCancel(ctx), sb); err == nil && berr == nil {
		if res.State == agentproto.StateKilled && res.Signal == "SIGKILL" && after.OOMKills > before.OOMKills {
			res.State = "oom_killed"
			res.Error = "the sandbox's memory limit was reached"
		}
		if after.PIDsLimited > before.PIDsLimited {
			m.event(sb, "limit", "pids", map[string]any{"limit": sb.Limits.PIDs, "refused_forks": after.PIDsLimited - before.PIDsLimited})
		}
	}
	switch res.State {
	case "oom_killed":
		m.event(sb, "limit", "memory", map[string]any{"limit": sb.Limits.Memory})
	case agentproto.StateTimeout:
		m.event(sb, "limit", "exec_timeout", map[string]any{"timeout": req.Timeout})
	}
	m.auditExec(ctx, owner, sb, req, res, start, sum, nil)
	return res, nil
}

// limitCounts reads sb's limit counters, with the driver's cheaper read where it has one.
func (m *Manager) limitCounts(ctx context.Context, sb *store.Sandbox) (runtime.Stats, error) {
	drv := m.driver(sb)
	if lc, ok := drv.(runtime.LimitCounter); ok {
		return lc.LimitCounts(ctx, sb.ID)
	}
	return drv.Stats(ctx, sb.ID)
}

// auditExec records an exec in the audit log.
func (m *Manager) auditExec(ctx context.Context, owner string, sb *store.Sandbox, req ExecRequest, res *agentproto.ExitResult, start time.Time, sum hash.Hash, err error) {
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	m.auditProcess(ctx, processAudit{owner: owner, sb: sb, argv: argv, cwd: req.Cwd, start: start, sum: sum}, res, "", err)
}

// processAudit is what the audit log keeps of a process started in a sandbox: whose
// call started it, its kind (via: "" for an exec, else "session", "terminal" or
// "process"), its command and working directory, when it started, and a checksum of
// its output when the node sees all of it (sum), never the output.
type processAudit struct {
	owner string
	sb    *store.Sandbox
	via   string
	argv  []string
	cwd   string
	start time.Time
	sum   hash.Hash
}

// auditProcess records a process in the audit log, as action "exec", with how long it
// had run: how it ended (res), or why it failed (err), or else how, which is
// "started" when empty (the record of the start of a session or terminal, whose end
// gets a record of its own).
func (m *Manager) auditProcess(ctx context.Context, p processAudit, res *agentproto.ExitResult, how string, err error) {
	if m.auditLog == nil {
		return
	}
	d := map[string]any{"argv": audit.ClipList(p.argv), "cwd": audit.Clip(p.cwd), "duration_ms": m.now().Sub(p.start).Milliseconds()}
	if p.via != "" {
		d["via"] = p.via
	}
	if p.sum != nil {
		d["output_sha256"] = hex.EncodeToString(p.sum.Sum(nil))
	}
	result := "started"
	switch {
	case res != nil:
		result, d["exit_code"] = res.State, res.ExitCode
	case err != nil:
		result = errdefs.Code(err)
	case how != "":
		result = how
	}
	owner := p.owner
	if actor, ok := ctx.Value(actorKey{}).(string); ok {
		owner = actor // an administrator acting on another identity's sandbox
	}
	if aerr := m.auditLog.Append(ctx, audit.Entry{Identity: owner, Action: "exec", Resource: p.sb.Name, Sandbox: p.sb.ID,
		Result: result, Detail: d}); aerr != nil {
		m.log.Error("audit log", "err", aerr)
	}
}

// AgentError maps an error the sandbox's agent answered with (or a damaged frame) to
// an API error; ok is false when the agent did not answer at all.
func AgentError(err error) (mapped error, ok bool) {
	var re *agentproto.RemoteError
	switch {
	case errors.As(err, &re) && re.Code == agentproto.CodeChecksum, errors.Is(err, agentproto.ErrChecksum):
		return errdefs.Unavailable("a message to or from the sandbox was damaged in transit").WithCause(err), true
	case re != nil && re.Code == agentproto.CodeBusy:
		return errdefs.Precondition("%s", re.Message), true
	case re != nil:
		return &errdefs.Error{Class: errdefs.FromCode(re.Code), Msg: re.Message, Cause: err}, true
	case errors.Is(err, agent.ErrReplyTooLarge):
		return errdefs.Unavailable("the sandbox kept sending output after its command was stopped for writing too much; stream the call to get all of a command's output").WithCause(err), true
	case errors.Is(err, agentproto.ErrBadReply):
		return errdefs.Unavailable("the sandbox's agent sent a reply that is not valid").WithCause(err), true
	case errors.Is(err, agentproto.ErrFrameTooLarge):
		return errdefs.Unavailable("the sandbox's agent sent a message larger than %d bytes; the call was abandoned", agentproto.MaxPayload).WithCause(err), true
	case errors.Is(err, agent.ErrReplyTimeout):
		return errdefs.Unavailable("the sandbox did not answer in time").WithCause(err), true
	}
	return nil, false
}

// agentFailed turns a failed agent call into an API error, and notices a sandbox whose
// container has ended.
func (m *Manager) agentFailed(sb *store.Sandbox, err error) error {
	if mapped, ok := AgentError(err); ok {
		return mapped
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return err // nothing was asked of the sandbox (bad input is refused before it is sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if st, serr := m.driver(sb).Status(ctx, sb.ID); serr == nil && st != runtime.StatusRunning {
		m.ended(ctx, sb.ID, "the sandbox's container ended")
		return errdefs.Unavailable("sandbox %q is no longer running", sb.Name).WithCause(err)
	}
	return errdefs.Unavailable("sandbox %q did not answer", sb.Name).WithCause(err)
}

// ended records that a sandbox's container is gone on its own. Past its maximum
// lifetime the sandbox is terminated; otherwise (the agent died, the host rebooted) it
// becomes suspended with its upper layer intact, and the next call resumes it.
func (m *Manager) ended(ctx context.Context, id, why string) {
	unlock := m.locks.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil || sb.State != Running {
		return
	}
	m.containerGone(ctx, sb, why)
}

// containerGone handles a running sandbox without a container; the caller holds its lock.
func (m *Manager) containerGone(ctx context.Context, sb *store.Sandbox, why string) {
	// The agent's clock rounds the deadline to whole seconds; allow for that.
	if !sb.ExpiresAt.IsZero() && !m.now().Add(2*time.Second).Before(sb.ExpiresAt) {
		sb.Failure = "the sandbox reached its maximum lifetime"
		if err := m.terminate(ctx, sb, "max_lifetime"); err != nil {
			m.log.Warn("clean up expired sandbox", "sandbox", sb.ID, "err", err)
		}
		return
	}
	m.event(sb, "container_gone", "ended", map[string]string{"reason": why})
	if err := m.suspend(ctx, sb, "container_gone"); err != nil {
		m.log.Warn("keep sandbox whose container ended", "sandbox", sb.ID, "err", err)
	}
}

func sortedEnv(env map[string]string) []string {
	out := envList(nil, env)
	sort.Strings(out)
	return out
}

type actorKey struct{}

// WithActor names the identity that makes the calls under ctx, for the audit log, when
// it may differ from the sandbox's owner.
func WithActor(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, actorKey{}, identity)
}

type creatorKey struct{}

// WithCreator marks ctx as a call made by code inside sandbox id, with its session
// credential: sandboxes it creates or forks record id as their CreatedBy.
func WithCreator(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, creatorKey{}, id)
}

// creatorOf is the sandbox whose code made the call in ctx, if any.
func creatorOf(ctx context.Context) string {
	id, _ := ctx.Value(creatorKey{}).(string)
	return id
}

// OwnerOf returns the owner of the sandbox with id.
func (m *Manager) OwnerOf(ctx context.Context, id string) (string, error) {
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil {
		return "", err
	}
	if _, member := poolOf(sb); member {
		// A pool member is nobody's until a create claims it: no call may reach it.
		return "", errdefs.NotFound("sandbox %q not found", id)
	}
	return sb.Owner, nil
}
