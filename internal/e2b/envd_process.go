package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// keepAliveEvery is how often an idle process stream carries a keep-alive event, so
// proxies between the SDK and the node do not close it.
var keepAliveEvery = 30 * time.Second

// Bounds of what a process call may ask for.
const (
	maxArgs     = 4096
	maxPTYSide  = 4096
	maxInputLen = agentproto.MaxPayload
)

// processService is the envd process service over the sandbox's agent, whose process
// table keeps the processes: they outlive the calls that started or watched them.
type processService struct{ c *Control }

func (s *processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	t := targetOf(ctx)
	spec, err := procSpec(ctx, t, req.Msg)
	if err != nil {
		return err
	}
	// The process ends at the call's timeout (the SDKs send one per command), on the
	// agent's clock, not when the caller goes: a command run in the background
	// outlives its stream.
	if deadline, ok := ctx.Deadline(); ok {
		spec.TimeoutMS = max(1, time.Until(deadline).Milliseconds())
	}
	p, err := t.wk.StartProc(ctx, spec)
	if err != nil {
		return err
	}
	return relay(ctx, p, s.ending(t), func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	})
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	t := targetOf(ctx)
	pid, tag, err := selector(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	p, err := t.wk.AttachProc(ctx, pid, tag)
	if err != nil {
		return err
	}
	return relay(ctx, p, s.ending(t), func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

// ending says whether t's sandbox is being ended or is gone: killed, or failed. A
// terminate records the sandbox terminating before it kills its processes, so a
// stream the kill breaks reads it so at once.
func (s *processService) ending(t *target) func(context.Context) bool {
	return func(ctx context.Context) bool {
		sb, err := s.c.m.ByID(ctx, t.id)
		return errors.Is(err, errdefs.ErrNotFound) || (err == nil && e2bState(sb.State) == "")
	}
}

func (s *processService) List(ctx context.Context, req *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	t := targetOf(ctx)
	list, err := t.wk.ProcList(ctx)
	if err != nil {
		return nil, err
	}
	if len(list) > 4096 {
		list = list[:4096] // the agent's own bound is lower; never trust it
	}
	out := &processpb.ListResponse{}
	for _, info := range list {
		pi := &processpb.ProcessInfo{Pid: uint32(info.PID), Config: &processpb.ProcessConfig{Envs: map[string]string{}}}
		if len(info.Argv) > 0 {
			pi.Config.Cmd, pi.Config.Args = info.Argv[0], info.Argv[1:]
		}
		for _, kv := range info.Env {
			k, v, _ := strings.Cut(kv, "=")
			pi.Config.Envs[k] = v
		}
		if info.Cwd != "" {
			pi.Config.Cwd = &info.Cwd
		}
		if info.Tag != "" {
			pi.Tag = &info.Tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	t := targetOf(ctx)
	pid, tag, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	size := req.Msg.GetPty().GetSize()
	if size == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil // nothing to change
	}
	rows, cols, err := ptySize(size)
	if err != nil {
		return nil, err
	}
	if err := t.wk.ProcResize(ctx, pid, tag, rows, cols); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	t := targetOf(ctx)
	pid, tag, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := sendInput(ctx, t.wk, pid, tag, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	t := targetOf(ctx)
	var (
		pid     int
		tag     string
		started bool
	)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			var err error
			if pid, tag, err = selector(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
			started = true
		case *processpb.StreamInputRequest_Data:
			if !started {
				return nil, errdefs.Invalid("input before the start event that names the process")
			}
			if err := sendInput(ctx, t.wk, pid, tag, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	t := targetOf(ctx)
	pid, tag, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		return nil, errdefs.Invalid("signal %v is not one to send: SIGNAL_SIGTERM or SIGNAL_SIGKILL", req.Msg.GetSignal())
	}
	if err := t.wk.ProcSignal(ctx, pid, tag, sig); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	t := targetOf(ctx)
	pid, tag, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := t.wk.ProcCloseStdin(ctx, pid, tag); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// procSpec turns a start request into the agent's process spec, checking its bounds.
func procSpec(ctx context.Context, t *target, req *processpb.StartRequest) (agentproto.ProcSpec, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return agentproto.ProcSpec{}, errdefs.Invalid("process.cmd is empty; name the program to run")
	}
	if len(cfg.GetArgs()) > maxArgs {
		return agentproto.ProcSpec{}, errdefs.Invalid("a process takes at most %d arguments", maxArgs)
	}
	if _, err := t.lookupUser(ctx); err != nil {
		return agentproto.ProcSpec{}, err
	}
	spec := agentproto.ProcSpec{
		Argv:  append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		User:  t.user,
		Tag:   req.GetTag(),
		Stdin: req.Stdin == nil || req.GetStdin(),
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.GetEnvs())) {
		spec.Env = append(spec.Env, k+"="+cfg.GetEnvs()[k])
	}
	if cfg.Cwd != nil {
		cwd, err := t.resolvePath(ctx, cfg.GetCwd())
		if err != nil {
			return agentproto.ProcSpec{}, err
		}
		spec.Cwd = cwd
	}
	if req.Pty != nil {
		spec.PTY, spec.Rows, spec.Cols = true, 24, 80
		if size := req.GetPty().GetSize(); size != nil {
			var err error
			if spec.Rows, spec.Cols, err = ptySize(size); err != nil {
				return agentproto.ProcSpec{}, err
			}
		}
	}
	return spec, nil
}

func ptySize(size *processpb.PTY_Size) (rows, cols uint16, err error) {
	if size.GetRows() < 1 || size.GetRows() > maxPTYSide || size.GetCols() < 1 || size.GetCols() > maxPTYSide {
		return 0, 0, errdefs.Invalid("terminal size %dx%d (cols x rows) is out of range: each side 1-%d", size.GetCols(), size.GetRows(), maxPTYSide)
	}
	return uint16(size.GetRows()), uint16(size.GetCols()), nil
}

// selector returns the pid or tag a ProcessSelector names.
func selector(sel *processpb.ProcessSelector) (pid int, tag string, err error) {
	switch s := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if s.Pid == 0 || s.Pid > 1<<22 {
			return 0, "", errdefs.Invalid("pid %d is not a process id", s.Pid)
		}
		return int(s.Pid), "", nil
	case *processpb.ProcessSelector_Tag:
		if s.Tag == "" {
			return 0, "", errdefs.Invalid("the process tag is empty")
		}
		return 0, s.Tag, nil
	}
	return 0, "", errdefs.Invalid("no process named: give its pid or its tag")
}

func sendInput(ctx context.Context, wk *manager.Work, pid int, tag string, in *processpb.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		data = v.Stdin
	case *processpb.ProcessInput_Pty:
		data = v.Pty
	default:
		return errdefs.Invalid("no input given: stdin or pty bytes")
	}
	if len(data) > maxInputLen {
		return errdefs.Invalid("input of %d bytes is more than one call takes (%d); send it in pieces", len(data), maxInputLen)
	}
	if len(data) == 0 {
		return nil
	}
	return wk.ProcInput(ctx, pid, tag, data)
}

// relay sends a process's events to send until it ends or ctx is done: the start
// event with its pid, its output, keep-alives while it is quiet, and its end. The
// process keeps running when ctx ends first. When the stream breaks because the
// sandbox is being ended (ended says so), it ends without an error, as envd's stream
// ends when its sandbox is killed.
func relay(ctx context.Context, p *manager.Proc, ended func(context.Context) bool, send func(*processpb.ProcessEvent) error) error {
	outs, stop := receive(p.Recv, func(o manager.ProcOutput) bool { return o.End != nil }, p.Close)
	defer stop()
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: uint32(p.PID)}}}); err != nil {
		return err
	}
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-keepAlive.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case r := <-outs:
			if r.err != nil {
				if ended(ctx) {
					return nil
				}
				if errors.Is(r.err, io.EOF) {
					return errdefs.Unavailable("the sandbox's agent ended the stream of process %d without its end", p.PID)
				}
				return r.err
			}
			if r.v.End != nil {
				return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: endEvent(r.v.End)}})
			}
			if len(r.v.Data) == 0 {
				continue
			}
			data := &processpb.ProcessEvent_DataEvent{}
			switch {
			case p.PTY:
				data.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: r.v.Data}
			case r.v.Stderr:
				data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: r.v.Data}
			default:
				data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: r.v.Data}
			}
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}}); err != nil {
				return err
			}
			keepAlive.Reset(keepAliveEvery)
		}
	}
}

// endEvent describes how a process ended as a Go program would: exited with its code
// and "exit status N", or killed by a signal with code -1 and "signal: NAME".
func endEvent(r *agentproto.ExitResult) *processpb.ProcessEvent_EndEvent {
	ev := &processpb.ProcessEvent_EndEvent{ExitCode: int32(r.ExitCode), Exited: true, Status: fmt.Sprintf("exit status %d", r.ExitCode)}
	if r.Signal != "" {
		ev.ExitCode, ev.Exited = -1, false
		name := r.Signal
		if n := unix.SignalNum(r.Signal); n != 0 {
			name = n.String()
		}
		ev.Status = "signal: " + name
	}
	if r.Error != "" {
		msg := audit.Clip(r.Error) // the agent's, so the sandbox's, text
		ev.Error = &msg
	}
	return ev
}
