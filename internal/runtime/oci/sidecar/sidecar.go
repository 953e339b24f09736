// Package sidecar is the two small host processes the OCI driver starts beside a
// sandbox, from the agent's binary (cmd/airlock-agent) under a hidden first argument:
// the holder of a sandbox's user namespace (HoldUserns) and the broker of its agent
// socket for engines with their own kernel (Broker). They live here, apart from the
// driver, so that the agent's binary links them without the driver.
//
// It imports nothing of Airlock. Hostile surface: none; the broker carries no data, only
// descriptors of connections the daemon made.
package sidecar

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// HolderCommand is the hidden first argument that runs HoldUserns.
const HolderCommand = "_userns-hold"

// HoldUserns holds the user namespace it was started in open: it blocks until standard
// input closes.
func HoldUserns() error {
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}

// BrokerCommand is the hidden first argument that runs Broker.
const BrokerCommand = "_agent-broker"

// Broker serves the broker: fd 3 is the bound agent socket, fd 4 the hand-off socket. It
// hands every connection accepted on the first to the agent over the second, and exits
// when the sandbox's end of the hand-off socket is gone.
func Broker() error {
	const ln, handoff = 3, 4
	if err := unix.Listen(ln, 128); err != nil {
		return fmt.Errorf("agent broker: listen: %w", err)
	}
	go func() {
		// The agent never writes: a read returns only when the sandbox's end is gone.
		var b [1]byte
		for {
			_, err := unix.Read(handoff, b[:])
			if !errors.Is(err, unix.EINTR) {
				os.Exit(0)
			}
		}
	}()
	for {
		c, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		case err != nil:
			return fmt.Errorf("agent broker: accept: %w", err)
		}
		err = unix.Sendmsg(handoff, []byte{0}, unix.UnixRights(c), nil, 0)
		unix.Close(c)
		if err != nil {
			return fmt.Errorf("agent broker: hand off: %w", err)
		}
	}
}
