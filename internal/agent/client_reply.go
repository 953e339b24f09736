package agent

// The checks of what an agent answers. Whatever the agent sends was written by code
// inside the sandbox: its text is clipped before it reaches logs, the audit log or a
// client, its numbers and states must be ones a real agent sends, and its lists are
// refused once they pass their bound, before the rest is decoded.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/clip"
)

// finish decodes the frame that ends a call: a Result into v, or an Error. The agent's
// text in either is clipped, and a result's state must be one a real agent sends.
func finish(t agentproto.FrameType, p []byte, v any) error {
	switch t {
	case agentproto.FrameResult:
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(p, v); err != nil {
			return decodeErr("result", err)
		}
		return checkResult(v)
	case agentproto.FrameError:
		re := &agentproto.RemoteError{}
		if err := json.Unmarshal(p, re); err != nil {
			return decodeErr("error", err)
		}
		re.Code, re.Message = clip.Text(re.Code, maxCodeLen), clip.Text(re.Message, maxAgentText)
		return re
	}
	return fmt.Errorf("%w: a frame of type %q ended the call", agentproto.ErrBadReply, byte(t))
}

// Bounds of the agent's text the client passes on to logs, the audit log and clients.
const (
	maxAgentText = 1024 // an error's message, a result's error
	maxCodeLen   = 64   // an error's code
	maxSignalLen = 16   // a signal's name
)

// decodeErr reports a reply that does not decode. encoding/json quotes a number it
// cannot store whole, and the agent's number may be a megabyte of digits.
func decodeErr(what string, err error) error {
	return fmt.Errorf("%w: decode %s: %s", agentproto.ErrBadReply, what, clip.Text(err.Error(), maxAgentText))
}

// checkResult refuses a result no real agent sends and clips its text: a result's
// state goes into the audit log and its error to the caller.
func checkResult(v any) error {
	var state string
	var states []string
	switch r := v.(type) {
	case *agentproto.ExitResult:
		if len(r.Signal) > maxSignalLen {
			return fmt.Errorf("%w: a result named the signal %.64q", agentproto.ErrBadReply, r.Signal)
		}
		r.Error = clip.Text(r.Error, maxAgentText)
		state, states = r.State, []string{agentproto.StateSucceeded, agentproto.StateFailed, agentproto.StateTimeout, agentproto.StateCancelled, agentproto.StateKilled}
	case *agentproto.SendResult:
		r.Error = clip.Text(r.Error, maxAgentText)
		state, states = r.State, []string{agentproto.StateSucceeded, agentproto.StateFailed, agentproto.StateExited, agentproto.StateCancelled}
	case *agentproto.SessionEnd:
		state, states = r.State, []string{agentproto.StateExited, agentproto.StateClosed}
	case *agentproto.LogsResult:
		if r.Dropped < 0 {
			return fmt.Errorf("%w: a log that dropped %d bytes", agentproto.ErrBadReply, r.Dropped)
		}
		state, states = r.State, []string{"running", agentproto.StateExited}
	case *agentproto.SizeResult:
		if r.Size < 0 {
			return fmt.Errorf("%w: a file of %d bytes", agentproto.ErrBadReply, r.Size)
		}
		return nil
	default:
		return nil
	}
	for _, s := range states {
		if state == s {
			return nil
		}
	}
	return fmt.Errorf("%w: a result with state %.64q", agentproto.ErrBadReply, state)
}

// decodeList decodes the JSON array p, refusing one of more than max elements before
// it holds more of them: a megabyte of "{}," is a third of a million elements.
func decodeList[T any](p []byte, max int, what string) ([]T, error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	tok, err := dec.Token()
	if err != nil {
		return nil, decodeErr(what, err)
	}
	if tok == nil { // null
		return nil, nil
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("%w: decode %s: not a list", agentproto.ErrBadReply, what)
	}
	var out []T
	for dec.More() {
		if len(out) == max {
			return nil, fmt.Errorf("%w: a %s of more than %d entries", errTooMany, what, max)
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return nil, decodeErr(what, err)
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, decodeErr(what, err)
	}
	return out, nil
}

// errTooMany reports a list longer than the client takes.
var errTooMany = fmt.Errorf("%w: too many entries", agentproto.ErrBadReply)

// checkSession refuses a session no real agent describes: the daemon puts its id into
// paths and shows all of it to the sandbox's owner.
func checkSession(si *agentproto.SessionInfo) error {
	why := ""
	switch {
	case si.ID == "" || len(si.ID) > 64 || strings.Trim(si.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "":
		why = fmt.Sprintf("the id %.64q", si.ID)
	case si.Kind != agentproto.SessionPython && si.Kind != agentproto.SessionShell && si.Kind != agentproto.SessionRaw:
		why = fmt.Sprintf("the kind %.64q", si.Kind)
	case si.PID <= 0 || si.PID > maxPID:
		why = fmt.Sprintf("pid %d", si.PID)
	}
	if why != "" {
		return fmt.Errorf("%w: the sandbox's agent described a session with %s", agentproto.ErrBadReply, why)
	}
	return nil
}
