package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// verb is one CLI command.
type verb struct {
	name  string // "create", or "image import" for a subcommand
	args  string // the synopsis after the name
	short string // one line for the command list
	long  string // more help, shown with the verb's usage
	run   func(c *cmd, args []string) error
	// daemon marks a verb main runs itself (serve, agent, check-config): it has its own
	// flags and none of the global ones.
	daemon bool
	// argsOf makes args on first use instead (serve's, from its many flags), so that no
	// call pays at start for a synopsis only usage and help print.
	argsOf func() string
}

// synopsis is the verb's args.
func (v *verb) synopsis() string {
	if v.argsOf != nil {
		return v.argsOf()
	}
	return v.args
}

// verbList is every verb Run dispatches, in the order help lists them.
var verbList = []*verb{
	createVerb, lsVerb, getVerb, execVerb, runVerb, runCodeVerb, logsVerb, shellVerb, cpVerb, rmVerb,
	suspendVerb, resumeVerb, eventsVerb, statsVerb,
	snapshotCreateVerb, snapshotLsVerb, snapshotGetVerb, snapshotRmVerb, restoreVerb, forkVerb,
	volumeCreateVerb, volumeLsVerb, volumeGetVerb, volumeResizeVerb, volumeRmVerb, volumeSnapshotVerb, volumeAttachVerb, volumeDetachVerb, gcVerb, poolSetVerb, poolLsVerb, poolRmVerb,
	nodeLsVerb, nodeDrainVerb, nodeReadyVerb,
	networkGetVerb, networkSetVerb, egressLogVerb, portExposeVerb, portLsVerb, portCloseVerb,
	opsGetVerb, imageImportVerb, imagePullVerb, imagePrewarmVerb, imageLsVerb, imageInspectVerb, imageExportVerb, imageRmVerb, imagePruneVerb,
	whoamiVerb, userLsVerb, userCreateVerb, userRmVerb, userRolesVerb, roleLsVerb, roleCreateVerb, roleRmVerb,
	tokenCreateVerb, tokenLsVerb, tokenRevokeVerb, auditLsVerb, auditVerifyVerb,
	secretCreateVerb, secretLsVerb, secretGetVerb, secretRotateVerb, secretRevokeVerb, secretRmVerb, secretRekeyVerb, secretBindVerb, secretUnbindVerb, registryLoginVerb, registryLogoutVerb, fenceVerb, mcpVerb, statusVerb, consoleVerb, riskVerb, versionVerb,
}

// verbs indexes verbList by name.
var verbs = func() map[string]*verb {
	m := map[string]*verb{}
	for _, v := range verbList {
		m[v.name] = v
	}
	return m
}()

// groups are the verbs that take a subcommand.
var groups = map[string]bool{"image": true, "ops": true, "snapshot": true, "network": true, "egress": true, "port": true,
	"user": true, "role": true, "token": true, "audit": true, "secret": true, "registry": true, "pool": true, "node": true,
	"volume": true}

const helpHeader = `airlock runs untrusted code in durable, named, isolated sandboxes.

usage: airlock [global flags] COMMAND [flags] [args]

Commands:
`

const helpDaemon = `  serve                           run the daemon
  agent                           the in-sandbox agent (started by the daemon, not by hand)
  check-config                    check a daemon configuration file
  help [COMMAND]                  show help
`

const helpFooter = `
Global flags (accepted by every command, before or after it):
  --socket PATH        daemon socket (default $AIRLOCK_SOCKET or /run/airlock/airlock.sock)
  --addr HOST:PORT     reach a daemon over TCP instead (with --token or $AIRLOCK_TOKEN);
                       https://HOST:PORT for one with tls_cert ($AIRLOCK_CA_FILE: CAs to trust)
  --token T            bearer token for --addr (default $AIRLOCK_TOKEN)
  -o, --output FORMAT  table (default) or json

Flags may come before or after arguments; "--" ends the flags before a command.
Exit codes: 0 success; 1 a call failed (printed as "airlock: MESSAGE (CODE)");
2 bad usage. exec, run and shell exit with the command's own code, or
  124 it timed out, 137 it was killed for memory or by SIGKILL (128+N for signal N),
  130 it was cancelled (Ctrl-C).
`

// printHelp writes the command list.
func printHelp(w io.Writer) {
	io.WriteString(w, helpHeader)
	for _, v := range verbList {
		fmt.Fprintf(w, "  %-31s %s\n", listName(v), v.short)
	}
	io.WriteString(w, helpDaemon)
	io.WriteString(w, helpFooter)
}

// positionals returns the leading words of a synopsis that name positional arguments:
// "NAME" of "NAME [--image IMG]".
func positionals(synopsis string) []string {
	var words []string
	for _, w := range strings.Fields(synopsis) {
		if strings.HasPrefix(w, "[") || strings.HasPrefix(w, "-") {
			break
		}
		words = append(words, w)
	}
	return words
}

func listName(v *verb) string {
	return strings.TrimSpace(v.name + " " + strings.Join(positionals(v.synopsis()), " "))
}

// globalFlags are registered on every verb and described once, by help.
var globalFlags = map[string]bool{"socket": true, "addr": true, "token": true, "output": true, "o": true}

// printUsage writes one verb's usage and flags.
func printUsage(w io.Writer, v *verb, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: airlock %s %s\n\n%s\n", v.name, v.synopsis(), v.short)
	if v.long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(v.long, "\n"))
	}
	header := "\nFlags:"
	fs.VisitAll(func(f *flag.Flag) {
		if globalFlags[f.Name] && !v.daemon {
			return
		}
		if header != "" {
			fmt.Fprintln(w, header)
			header = ""
		}
		arg, usage := flag.UnquoteUsage(f)
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			usage += " (default " + f.DefValue + ")"
		}
		name := strings.TrimSpace(dashed(f.Name) + " " + arg)
		if len(name) > 24 {
			fmt.Fprintf(w, "  %s\n  %-24s %s\n", name, "", usage) // a long name on a line of its own
		} else {
			fmt.Fprintf(w, "  %-24s %s\n", name, usage)
		}
	})
	if !v.daemon {
		fmt.Fprintln(w, "\nGlobal flags: --socket PATH, --addr HOST:PORT, --token T, -o/--output table|json (see airlock help).")
	}
}

// printGroupUsage lists the subcommands of a group such as image.
func printGroupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "usage: airlock %s SUBCOMMAND\n\nSubcommands:\n", group)
	for _, v := range verbList {
		if strings.HasPrefix(v.name, group+" ") {
			fmt.Fprintf(w, "  %-31s %s\n", listName(v), v.short)
		}
	}
	if about := groupAbout[group]; about != "" {
		fmt.Fprintf(w, "\n%s\n", about)
	}
}

// runHelp answers "airlock help [COMMAND]" (and no command at all, which is a usage error).
func runHelp(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if name == "" {
		printHelp(stderr)
		return ExitError{2}
	}
	if len(args) == 0 {
		printHelp(stdout)
		return nil
	}
	var words []string
	for w, rest := splitVerb(args); w != ""; w, rest = splitVerb(rest) {
		words = append(words, w)
	}
	topic := strings.Join(words, " ")
	if topic == "" {
		printHelp(stdout)
		return nil
	}
	if groups[topic] {
		printGroupUsage(stdout, topic)
		return nil
	}
	v := lookupVerb(topic)
	if v == nil {
		unknownCommand(stderr, "airlock help", topic, verbNames())
		fmt.Fprintln(stderr, "see 'airlock help'")
		return ExitError{2}
	}
	c := newCmd(ctx, v, nil, stdout, stderr)
	return c.report(v.run(c, []string{"-h"}))
}
