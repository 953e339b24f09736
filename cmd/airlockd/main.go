// Command airlockd is Airlock's whole program: the daemon (serve), the agent that runs as
// PID 1 inside every sandbox (agent, a copy of this binary), and the CLI's verbs too.
// The airlock command beside it is the CLI alone and hands serve, check-config and agent
// to this binary (cmd/airlock), so that a CLI call does not load the daemon's code.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/fence"
	"github.com/airlockhq/airlock/internal/runtime/oci"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == oci.HolderCommand {
		oci.HoldUserns()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == oci.BrokerCommand {
		if err := oci.Broker(); err != nil {
			fmt.Fprintln(os.Stderr, "airlock:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == fence.ChildCommand {
		os.Exit(fence.ChildMain(os.Args[2:], os.Stderr)) // returns only if the command could not start
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" && !cli.HelpAsked(os.Args[2:]) {
		// The agent handles its own signals: it is PID 1 of the sandbox.
		if err := agent.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "airlock", err) // the agent's errors begin "agent: "
			if errors.Is(err, errdefs.ErrInvalidArgument) {
				os.Exit(2) // a usage error, as every verb's
			}
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:])
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
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
