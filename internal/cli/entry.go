package cli

import (
	"errors"
	"fmt"
	"io"
)

// DaemonVerb says whether name is a verb the daemon's binary (airlockd) runs itself:
// serve, check-config and agent. The CLI's binary (airlock) hands them to airlockd; Run
// has their help.
func DaemonVerb(name string) bool {
	_, ok := daemonVerbs[name]
	return ok
}

// DaemonBinary is the daemon's binary, installed beside the CLI's.
const DaemonBinary = "airlockd"

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
