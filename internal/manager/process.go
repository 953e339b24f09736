package manager

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"net"
	"slices"
	"sync"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/store"
)

// Every process the node starts in a sandbox — an exec, a session, a terminal, a process
// of the E2B plane's process table — starts through this file: its environment and user
// are built in prepare, a failed start is turned into an API error (and a dead container
// recorded) by agentFailed, and the start is recorded in the audit log by auditProcess.

// prepare reaches a sandbox of owner's for a new process and fills in what every
// process started there gets: the environment (what its secret bindings deliver, then
// the caller's own variables, which win), and, when the caller names no user, the user
// the sandbox's image runs as. The caller's environment and directory are checked
// first, by the rules of every plane (checkProcess), before the sandbox is reached.
func (m *Manager) prepare(ctx context.Context, owner, ref string, cwd string, env *[]string, uid, gid **uint32) (*agent.Client, *store.Sandbox, error) {
	if err := checkProcess(*env, cwd); err != nil {
		return nil, nil, err
	}
	cl, sb, err := m.agentOf(ctx, owner, ref)
	if err != nil {
		return nil, nil, err
	}
	if *env, err = m.ProcessEnv(ctx, sb, *env); err != nil {
		return nil, nil, err
	}
	if *uid == nil {
		if *uid, *gid, err = m.images.User(sb.ImageDigest); err != nil {
			return nil, nil, err
		}
	}
	return cl, sb, nil
}

// StartSession starts a session (a REPL, a shell, a raw process) in a sandbox of
// owner's. Its start is recorded in the audit log, and so is its end, once its process
// ends or the sandbox stops, by a watch on the agent that keeps no sandbox awake.
func (m *Manager) StartSession(ctx context.Context, owner, ref string, spec agentproto.SessionSpec) (*agentproto.SessionInfo, error) {
	_, sb, err := m.prepare(ctx, owner, ref, spec.Cwd, &spec.Env, &spec.UID, &spec.GID)
	if err != nil {
		return nil, err
	}
	pa := processAudit{owner: owner, sb: sb, via: "session", argv: spec.Argv, cwd: spec.Cwd, start: m.now()}
	if len(pa.argv) == 0 {
		pa.argv = []string{spec.Kind}
	}
	release, err := m.takeWatch(sb)
	if err != nil {
		return nil, err
	}
	info, watch, err := m.watchClient(sb).StartSessionWatched(ctx, spec)
	if err != nil {
		err = m.agentFailed(sb, err)
	}
	m.auditProcess(ctx, pa, nil, "", err)
	if watch == nil {
		release()
	} else {
		m.auditSessionEnd(context.WithoutCancel(ctx), pa, watch, release)
	}
	return info, err
}

// auditSessionEnd records how a session ended once its watch says so: exited (with its
// exit code) or closed, or "lost" when the sandbox stopped, or its agent went, first.
// A node that closes leaves the session running, unrecorded. The watch holds one of the
// sandbox's watch places (release gives it back) until then.
func (m *Manager) auditSessionEnd(ctx context.Context, pa processAudit, watch *agent.SessionWatch, release func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer release()
		defer watch.Close()
		stop := context.AfterFunc(m.ctx, func() { watch.Close() })
		defer stop()
		end, err := watch.Wait()
		switch {
		case m.ctx.Err() != nil:
		case err != nil:
			m.auditProcess(ctx, pa, nil, "lost", nil)
		case end.State == agentproto.StateClosed:
			m.auditProcess(ctx, pa, nil, agentproto.StateClosed, nil)
		default:
			m.auditProcess(ctx, pa, &agentproto.ExitResult{State: end.State, ExitCode: end.ExitCode}, "", nil)
		}
	}()
}

// OpenTerminal starts an interactive terminal (spec.Rows and Cols set) in a sandbox of
// owner's and returns the connection that carries it: the agent's checksummed frames,
// which the caller passes to its client unchanged. Its start is recorded in the audit
// log, and its end when the caller closes the connection.
func (m *Manager) OpenTerminal(ctx context.Context, owner, ref string, spec agentproto.ExecSpec) (net.Conn, error) {
	cl, sb, err := m.prepare(ctx, owner, ref, spec.Cwd, &spec.Env, &spec.UID, &spec.GID)
	if err != nil {
		return nil, err
	}
	pa := processAudit{owner: owner, sb: sb, via: "terminal", argv: spec.Argv, cwd: spec.Cwd, start: m.now()}
	conn, err := cl.OpenRaw(ctx, &agentproto.Request{Op: agentproto.OpPTY, Exec: &spec})
	if err != nil {
		err = m.agentFailed(sb, err)
	}
	m.auditProcess(ctx, pa, nil, "", err)
	if err != nil {
		return nil, err
	}
	actx := context.WithoutCancel(ctx)
	return &terminalConn{Conn: conn, end: func(res *agentproto.ExitResult) { m.auditProcess(actx, pa, res, "closed", nil) }}, nil
}

// Proc is a process of a sandbox's process table that a call started or attached to.
// Its output is checksummed for the audit record written when it ends, or when the
// caller closes it first (result "detached": the process runs on).
type Proc struct {
	*agent.Proc
	m     *Manager
	sb    *store.Sandbox
	audit func(res *agentproto.ExitResult, err error) // nil: attached, not started
	sum   hash.Hash
	once  sync.Once
}

// ProcOutput is one message of a process's stream: output, or its end.
type ProcOutput = agent.ProcOutput

// StartProc starts a process in the sandbox's process table. spec.User names the user
// ("" the agent's own); the environment is built as for every process. ctx governs only
// the start: the process outlives it, and ends at spec.TimeoutMS.
func (w *Work) StartProc(ctx context.Context, spec agentproto.ProcSpec) (*Proc, error) {
	m, sb, cl := w.m, w.sb, w.cl
	err := checkProcess(spec.Env, spec.Cwd)
	if err != nil {
		return nil, err
	}
	if spec.Env, err = m.ProcessEnv(ctx, sb, spec.Env); err != nil {
		return nil, err
	}
	pa := processAudit{owner: sb.Owner, sb: sb, via: "process", argv: spec.Argv, cwd: spec.Cwd, start: m.now(), sum: sha256.New()}
	audit := func(res *agentproto.ExitResult, err error) {
		m.auditProcess(context.WithoutCancel(ctx), pa, res, "detached", err) // detached: its caller went; it runs on
	}
	p, err := cl.ProcStart(context.WithoutCancel(ctx), spec)
	if err != nil {
		err = m.agentFailed(sb, err)
		audit(nil, err)
		return nil, err
	}
	return &Proc{Proc: p, m: m, sb: sb, audit: audit, sum: pa.sum}, nil
}

// AttachProc attaches to a running process of the sandbox's table, named by pid or,
// when pid is 0, by tag.
func (w *Work) AttachProc(ctx context.Context, pid int, tag string) (*Proc, error) {
	p, err := w.cl.ProcAttach(ctx, pid, tag)
	if err != nil {
		return nil, w.fail(err)
	}
	return &Proc{Proc: p, m: w.m, sb: w.sb}, nil
}

// Recv returns the process's next output, or its end.
func (p *Proc) Recv() (ProcOutput, error) {
	out, err := p.Proc.Recv()
	switch {
	case errors.Is(err, agent.ErrStreamClosed):
	case err != nil:
		err = p.m.agentFailed(p.sb, err)
		p.finish(nil, err)
	case out.End != nil:
		p.finish(out.End, nil)
	case p.sum != nil:
		p.sum.Write(out.Data)
	}
	return out, err
}

// Close ends the stream; the process runs on.
func (p *Proc) Close() error {
	p.finish(nil, nil)
	return p.Proc.Close()
}

func (p *Proc) finish(res *agentproto.ExitResult, err error) {
	if p.audit != nil {
		p.once.Do(func() { p.audit(res, err) })
	}
}

// ProcList lists the live processes of the sandbox's table. What a process's
// environment got from the sandbox's secret bindings is left out: a listing shows what
// its caller asked for, never a secret's value.
func (w *Work) ProcList(ctx context.Context) ([]agentproto.ProcInfo, error) {
	list, err := w.cl.ProcList(ctx)
	if err != nil {
		return nil, w.fail(err)
	}
	delivered, err := w.m.ProcessEnv(ctx, w.sb, nil)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Env = slices.DeleteFunc(list[i].Env, func(kv string) bool { return slices.Contains(delivered, kv) })
	}
	return list, nil
}
