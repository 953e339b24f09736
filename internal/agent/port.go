package agent

import (
	"context"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// portDialTimeout bounds the agent's connect to a port of its own sandbox.
const portDialTimeout = 5 * time.Second

// handlePortDial connects to port on the sandbox's loopback and, once connected, copies
// bytes between it and the call's connection until either side ends. It is how the
// daemon reaches an exposed port of a sandbox whose network stack the host cannot enter
// (a runtime with its own kernel).
func (s *server) handlePortDial(c net.Conn, fw *frameWriter, port int) error {
	if port < 1 || port > 65535 {
		return errdefs.Invalid("port %d is not a TCP port (1-65535)", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), portDialTimeout)
	defer cancel()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return errdefs.Unavailable("nothing answered on port %d in the sandbox: %v", port, err)
	}
	defer up.Close()
	if err := fw.json(agentproto.FrameResult, struct{}{}); err != nil {
		return nil
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	return nil
}
