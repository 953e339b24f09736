// Command airlockd is Airlock's daemon (serve, check-config), and the CLI's verbs too,
// the MCP server (mcp) among them. The airlock command beside it is the CLI alone and
// hands serve, check-config and mcp to this binary (cmd/airlock), so that a CLI call
// does not load the daemon's code, nor the MCP SDK; the
// agent is airlock-agent (cmd/airlock-agent), which the daemon installs into sandboxes.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/sweep"
	"github.com/airlockhq/airlock/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == fence.ChildCommand {
		os.Exit(fence.ChildMain(os.Args[2:], os.Stderr)) // returns only if the command could not start
	}
	if len(os.Args) > 1 && cli.BinaryOf(os.Args[1]) == version.AgentBinary && !cli.HelpAsked(os.Args[2:]) {
		err := cli.ExecBeside(version.AgentBinary, os.Args[1:])
		fmt.Fprintln(os.Stderr, "airlockd:", err)
		os.Exit(1)
	}
	cli.ServeMCP = serveMCP
	cli.SweepStateDir = sweep.StateDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:])
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}

// serveMCP is airlock mcp's server, which the CLI's binary does not link.
func serveMCP(ctx context.Context, cl *client.Client, f cli.MCPFlags, in io.Reader, out io.Writer, log *slog.Logger) error {
	return mcp.Serve(ctx, cl, mcp.Options{Version: version.String(), OutputLimit: f.MaxOutput, ReadLimit: f.MaxRead, Logger: log,
		HostWorkspaces: f.HostWorkspaces}, mcp.Listener{Addr: f.Listen, Token: f.Token, In: in, Out: out})
}

// Run dispatches one invocation.
func Run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve", "check-config":
			if cli.HelpAsked(args[1:]) {
				break // the CLI has their help
			}
			if args[0] == "serve" {
				// A hang-up (a closed terminal, an init system's reload) stops the
				// daemon the clean way too, not by the signal's default.
				ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
				defer stop()
				return serve(ctx, args[1:])
			}
			return checkConfig(args[1:])
		}
	}
	return cli.Run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}
