// Command airlock-agent is the binary the daemon installs into every sandbox: the agent,
// PID 1 there (agent), and the two small processes the OCI driver starts from the same
// file beside a sandbox (package sidecar). It links only those, so that every sandbox
// maps and initialises the agent's code and nothing of the daemon's; `airlock agent`
// runs it too (cmd/airlock).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime/oci/sidecar"
	"github.com/airlockhq/airlock/internal/version"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock-agent agent (--socket PATH | --listen-fd FD | --accept-fd FD) [flags]; see 'airlock agent --help'")
		os.Exit(2)
	}
	switch os.Args[1] {
	case sidecar.HolderCommand:
		sidecar.HoldUserns()
	case sidecar.BrokerCommand:
		if err := sidecar.Broker(); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-agent:", err)
			os.Exit(1)
		}
	case "--version", "version":
		fmt.Println("airlock-agent", version.String())
	case "agent":
		// The agent handles its own signals: it is PID 1 of the sandbox.
		if err := agent.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "airlock", err) // the agent's errors begin "agent: "
			if errors.Is(err, errdefs.ErrInvalidArgument) {
				os.Exit(2) // a usage error, as every verb's
			}
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "airlock-agent: unknown command %q: it runs the agent (airlock-agent agent …; see 'airlock agent --help')\n", os.Args[1])
		os.Exit(2)
	}
}
