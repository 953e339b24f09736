// Package mcp owns Airlock's Model Context Protocol server: the tools an AI agent calls
// (run_code, exec, read_file, write_file, list_files, create_sandbox, list_sandboxes,
// suspend, resume, terminate, snapshot, fork), their typed inputs and JSON schemas, and
// the bounding of what they return — stdout, stderr and file reads are capped, the cut
// is marked in the text, and an output that was cut is kept whole in the sandbox as a
// file that read_file can page through.
//
// It is a client of the daemon like the CLI: every tool call goes through the public Go
// SDK (package client) with the caller's own socket or token, so the daemon's
// authorization, policy and audit apply unchanged. It must not import the daemon's
// packages (server, manager, store, runtime, agent) — only client and api — and it
// keeps no sandbox state of its own. Transports (stdio, streamable HTTP) are the
// caller's choice: New returns an SDK server that the CLI runs on one of them.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/client"
)

// Defaults of Options.
const (
	DefaultOutputLimit = 32 << 10 // bytes of stdout, and of stderr, shown per call
	DefaultReadLimit   = 32 << 10 // bytes of a file returned per read_file call
	DefaultOutputDir   = "/tmp/airlock-mcp"
	DefaultMaxFull     = 64 << 20 // bytes of one stream kept in full when it is cut
)

// Options adjust a server. The zero value of each field means its default.
type Options struct {
	// Version is what the server reports to clients as its implementation version.
	Version string
	// OutputLimit caps the bytes of stdout and of stderr a run_code or exec call shows
	// (default DefaultOutputLimit): the head and the tail are shown, the middle is cut.
	OutputLimit int
	// ReadLimit caps the bytes one read_file call returns (default DefaultReadLimit).
	ReadLimit int
	// OutputDir is the directory in the sandbox where an output that was cut is kept
	// in full, as <exec-id>.stdout and <exec-id>.stderr (default DefaultOutputDir).
	OutputDir string
	// MaxFull caps the bytes of one stream kept in full (default DefaultMaxFull).
	MaxFull int64
	// Logger receives the server's diagnostics (default: discarded). In stdio mode it
	// must not write to stdout, which carries the protocol.
	Logger *slog.Logger
	// HostWorkspaces lets create_sandbox mount a directory of this machine at
	// /workspace. Set it only when the client is a local process of the server's own
	// user (stdio): over HTTP it would hand a remote client that user's files.
	HostWorkspaces bool
}

func (o Options) withDefaults() Options {
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.OutputLimit <= 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	if o.ReadLimit <= 0 {
		o.ReadLimit = DefaultReadLimit
	}
	if o.OutputDir == "" {
		o.OutputDir = DefaultOutputDir
	}
	if o.MaxFull <= 0 {
		o.MaxFull = DefaultMaxFull
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// instructions tell a client what the server is for.
const instructions = `Airlock runs untrusted code in durable, named, isolated sandboxes.
Use run_code for a one-off snippet (python, node or bash) in a throwaway sandbox, or pass
"sandbox" to run it in a named one. For work that spans calls, create_sandbox once, then
exec, write_file, read_file and list_files against it; suspend it when idle (files outside
/tmp survive), snapshot or fork it to branch, and terminate it when done.
Output is capped: a cut is marked in the text and the full output is kept in the sandbox
at the path given, for read_file with offset and limit.`

// tools is the server's behaviour: the client it calls the daemon with and its options.
type tools struct {
	cl   *client.Client
	opts Options
	log  *slog.Logger
}

// New returns an MCP server whose tools call the daemon through cl, as cl's identity.
func New(cl *client.Client, opts Options) (*mcpsdk.Server, error) {
	opts = opts.withDefaults()
	t := &tools{cl: cl, opts: opts, log: opts.Logger}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "airlock", Title: "Airlock sandboxes", Version: opts.Version},
		&mcpsdk.ServerOptions{Instructions: instructions})
	r := &registry{s: s, log: opts.Logger}
	t.addExecTools(r)
	t.addFileTools(r)
	t.addLifecycleTools(r)
	t.addStatsTools(r)
	t.addVolumeTools(r)
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// registry adds tools to a server and keeps the first error.
type registry struct {
	s   *mcpsdk.Server
	log *slog.Logger
	err error
}

// add registers a typed tool. Its input schema is inferred from In (descriptions from
// the jsonschema struct tags; fields without omitempty are required; unknown fields are
// refused) and then adjusted by fix, when fix is not nil. An error the handler returns
// becomes a tool error (IsError) carrying the daemon's message, and is logged.
func add[In, Out any](r *registry, tool *mcpsdk.Tool, fix func(*jsonschema.Schema), h mcpsdk.ToolHandlerFor[In, Out]) {
	if r.err != nil {
		return
	}
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		r.err = fmt.Errorf("tool %s: input schema: %w", tool.Name, err)
		return
	}
	if fix != nil {
		fix(schema)
	}
	tool.InputSchema = schema
	log := r.log
	mcpsdk.AddTool(r.s, tool, func(ctx context.Context, req *mcpsdk.CallToolRequest, in In) (*mcpsdk.CallToolResult, Out, error) {
		res, out, err := h(ctx, req, in)
		if err != nil {
			err = toolError(err)
			log.Info("tool call failed", "tool", tool.Name, "err", err)
		}
		return res, out, err
	})
}

// setEnum, setDefault, setMinimum and setPattern adjust one property of an inferred
// input schema (a name that is no property changes nothing).
func setEnum(s *jsonschema.Schema, prop string, values ...any) {
	if p := s.Properties[prop]; p != nil {
		p.Enum = values
	}
}

func setDefault(s *jsonschema.Schema, prop string, v any) {
	if p := s.Properties[prop]; p != nil {
		p.Default, _ = json.Marshal(v)
	}
}

func setMinimum(s *jsonschema.Schema, prop string, min float64) {
	if p := s.Properties[prop]; p != nil {
		p.Minimum = &min
	}
}

func setPattern(s *jsonschema.Schema, prop, pattern string) {
	if p := s.Properties[prop]; p != nil {
		p.Pattern = pattern
	}
}

// toolError is the message a failed call shows the agent: the API's message and code for
// an answer of the daemon, with a hint when the daemon could not be reached.
func toolError(err error) error {
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		return fmt.Errorf("%s (%s)", apiErr.Message, apiErr.Code)
	case client.IsUnavailable(err):
		return fmt.Errorf("%w (is the Airlock daemon running?)", err)
	}
	return err
}

// invalidf is a bad argument, refused before anything is called.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("invalid argument: "+format, args...)
}

// boolPtr is a tool annotation's optional hint.
func boolPtr(b bool) *bool { return &b }
