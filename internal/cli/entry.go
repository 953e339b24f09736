package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/airlockhq/airlock/internal/version"
)

// BinaryOf names the binary that runs verb name when that is not the CLI's (airlock):
// airlockd for serve and check-config, airlock-agent for agent; "" for every other verb.
// The three are installed side by side; Run has the help of every verb.
func BinaryOf(name string) string {
	switch {
	case daemonVerbs[name] == nil:
		return ""
	case name == agentVerb.name:
		return version.AgentBinary
	default:
		return version.DaemonBinary
	}
}

// ExecBeside replaces this process with the binary named bin in this binary's own
// directory (symbolic links to it resolved), running args. It returns only if that
// binary could not start.
func ExecBeside(bin string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	path := filepath.Join(filepath.Dir(self), bin)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s runs in %s, which is not beside %s (make install puts them side by side): %w", args[0], bin, self, err)
	}
	return fmt.Errorf("start %s: %w", path, syscall.Exec(path, append([]string{path}, args...), os.Environ()))
}

// HelpAsked reports whether args ask for help (-h, -help or --help before "--").
func HelpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// ExitCode is the exit code of a process whose main ended with err: an ExitError's code
// (its message is printed already), else 1 after printing err to stderr.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	fmt.Fprintln(stderr, "airlock:", err)
	return 1
}
