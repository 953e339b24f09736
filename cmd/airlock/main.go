// Command airlock is Airlock's command line: every verb of the CLI, and the fence's child
// for `airlock run` and `airlock fence`. The daemon (serve, check-config) is the airlockd
// binary installed beside it, and the agent airlock-agent; airlock hands those verbs to
// them by exec: `airlock serve` is the daemon, with this process's pid, arguments and
// environment. The CLI links none of the daemon's code (SQLite, the registry client,
// protobuf, the runtime driver), so a call pays only for its own start-up
// (docs/architecture.md).
package main

import (
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/fence"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == fence.ChildCommand {
		os.Exit(fence.ChildMain(os.Args[2:], os.Stderr)) // returns only if the command could not start
	}
	if len(os.Args) > 1 && cli.BinaryOf(os.Args[1]) != "" && !cli.HelpAsked(os.Args[2:]) {
		err := cli.ExecBeside(cli.BinaryOf(os.Args[1]), os.Args[1:])
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
	ctx, stop := cli.SignalContext(os.Args[1:])
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}
