package cli

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/version"
)

var mcpVerb = &verb{
	name:  "mcp",
	args:  "[--listen HOST:PORT [--listen-token T]] [--max-output SIZE] [--max-read SIZE]",
	short: "serve Airlock's tools to AI agents over the Model Context Protocol",
	long: `Without --listen, MCP runs over standard input and output, the way MCP clients start a
local server; with --listen, over streamable HTTP at http://HOST:PORT/mcp. It runs until
interrupted, or until the stdio client closes standard input (every request read before
that is still answered, so requests can be piped in). Logs go to standard error.

The tools: run_code, exec, read_file, write_file, list_files, create_sandbox,
list_sandboxes, suspend, resume, terminate, snapshot, fork (docs/mcp.md). Every call
reaches the daemon as this command's identity (--socket, or --addr with --token), so the
daemon's roles and policies apply. Over HTTP, whoever reaches the address acts as that
identity: a non-loopback address needs --listen-token (or $AIRLOCK_MCP_TOKEN), which
clients send as "Authorization: Bearer T".`,
	run: runMCP,
}

// maxMCPCap bounds --max-output and --max-read: an answer is read by a model.
const maxMCPCap = 16 << 20

// MCPFlags are the flags of airlock mcp that ServeMCP needs: where to serve (Listen,
// empty for stdio; Token), the caps on what a call returns, and whether host workspaces
// may be offered (over stdio and the unix socket only).
type MCPFlags struct {
	Listen, Token      string
	MaxOutput, MaxRead int
	HostWorkspaces     bool
}

// ServeMCP serves Airlock's MCP tools over cl as f says, on in and out for stdio, until
// ctx ends, logging to log. The daemon's binary (cmd/airlockd) sets it to package mcp's
// server; the CLI's binary leaves it nil, so that it links no MCP, and runs the verb in
// airlockd instead, as a process of its own (a server that runs until interrupted pays
// that start-up once).
var ServeMCP func(ctx context.Context, cl *client.Client, f MCPFlags, in io.Reader, out io.Writer, log *slog.Logger) error

func runMCP(c *cmd, args []string) error {
	listen := c.fs.String("listen", "", "serve streamable HTTP on `HOST:PORT` instead of stdio")
	token := c.fs.String("listen-token", "", "bearer token `T` HTTP clients must send (default $AIRLOCK_MCP_TOKEN)")
	var maxOutput, maxRead sizeFlag
	c.fs.Var(&maxOutput, "max-output", "show at most `SIZE` of stdout, and of stderr, per call (default 32KiB)")
	c.fs.Var(&maxRead, "max-read", "return at most `SIZE` per read_file call (default 32KiB)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	if maxOutput > maxMCPCap || maxRead > maxMCPCap {
		return usagef("--max-output and --max-read must be at most %s", formatSize(maxMCPCap))
	}
	if *token == "" {
		*token = os.Getenv("AIRLOCK_MCP_TOKEN")
	}
	if *listen != "" {
		if err := checkListen(*listen, *token); err != nil {
			return err
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if ServeMCP == nil {
		return ExecBeside(version.DaemonBinary, append([]string{"mcp"}, args...))
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil)).With("component", "mcp")
	return ServeMCP(c.ctx, cl, MCPFlags{Listen: *listen, Token: *token, MaxOutput: int(maxOutput), MaxRead: int(maxRead),
		HostWorkspaces: *listen == "" && cl.Local()}, c.stdin, c.stdout, log)
}

// checkListen refuses to serve a non-loopback address without a token.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--listen %q is not HOST:PORT", addr)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usagef("--listen %s is not a loopback address: anyone who reaches it would act as you; set --listen-token (or $AIRLOCK_MCP_TOKEN)", addr)
}
