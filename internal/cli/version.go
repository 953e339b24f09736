package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/internal/version"
)

var versionVerb = &verb{
	name:  "version",
	args:  "",
	short: "print the versions of this binary and of the daemon",
	run:   runVersion,
}

func runVersion(c *cmd, args []string) error {
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	server := ""
	cl, err := c.client()
	if err == nil {
		if s, serr := cl.Status(c.ctx); serr == nil {
			server = s.Version
		} else {
			err = serr
		}
	}
	if c.json() {
		out := map[string]string{"client": version.String()}
		if server != "" {
			out["server"] = server
		}
		return c.printJSON(out)
	}
	fmt.Fprintf(c.stdout, "client: %s\n", version.String())
	if server != "" {
		fmt.Fprintf(c.stdout, "server: %s\n", server)
	} else {
		fmt.Fprintf(c.stdout, "server: not reachable (%v)\n", err)
	}
	return nil
}
