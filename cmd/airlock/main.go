// Command airlock is Airlock's command line: every verb of the CLI, and the fence's child
// for `airlock run` and `airlock fence`. The daemon (serve, check-config) and the agent
// are the airlockd binary installed beside it, to which airlock hands those verbs by
// exec: `airlock serve` is the daemon, with this process's pid, arguments and
// environment. The CLI links none of the daemon's code (SQLite, the registry client,
// protobuf, the runtime driver), so a call pays only for its own start-up
// (docs/architecture.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/fence"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == fence.ChildCommand {
		os.Exit(fence.ChildMain(os.Args[2:], os.Stderr)) // returns only if the command could not start
	}
	if len(os.Args) > 1 && cli.DaemonVerb(os.Args[1]) && !cli.HelpAsked(os.Args[2:]) {
		err := execDaemon(os.Args[1:]) // returns only if airlockd could not start
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}

// execDaemon replaces this process with airlockd, from this binary's own directory
// (symbolic links to it resolved), running args.
func execDaemon(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bin := filepath.Join(filepath.Dir(self), cli.DaemonBinary)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s runs in the daemon's binary, %s, which is not beside %s (make install puts both there): %w", args[0], cli.DaemonBinary, self, err)
	}
	return fmt.Errorf("start %s: %w", bin, syscall.Exec(bin, append([]string{bin}, args...), os.Environ()))
}
