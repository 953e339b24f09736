package cli

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/term"
)

var shellVerb = &verb{
	name:  "shell",
	args:  "NAME [-- CMD [ARG...]]",
	short: "open an interactive terminal in a sandbox (a login shell by default)",
	long: `On a terminal, the local terminal is switched to raw mode (Ctrl-C goes to the
sandbox) and restored afterwards; window size changes follow. airlock exits with the
shell's exit code.`,
	run: runShell,
}

// defaultRows and defaultCols size the terminal when stdin is not one.
const defaultRows, defaultCols = 24, 80

func runShell(c *cmd, args []string) error {
	pos, command, err := c.parse(args, 1, true)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	fd, tty := terminalFd(c.stdin)
	rows, cols := uint16(defaultRows), uint16(defaultCols)
	if tty {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			rows, cols = uint16(h), uint16(w)
		}
	}
	p, err := cl.PTY(c.ctx, pos[0], rows, cols, command)
	if err != nil {
		return err
	}
	defer p.Close()

	restore := func() {}
	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return err
		}
		var once sync.Once
		restore = func() { once.Do(func() { _ = term.Restore(fd, old) }) }
		defer restore()

		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil {
						_ = p.Resize(uint16(h), uint16(w))
					}
				}
			}
		}()
		defer func() {
			signal.Stop(winch)
			close(done)
			wg.Wait()
		}()
	}

	// The stdin copier ends at EOF, or when a write fails once the PTY is closed; a copier
	// blocked reading a terminal ends with the process.
	go func() {
		if _, err := io.Copy(p, c.stdin); err == nil {
			_ = p.CloseStdin()
		}
	}()
	if _, err := io.Copy(c.stdout, p); err != nil {
		return err
	}
	res, err := p.Wait()
	if err != nil {
		return err
	}
	restore()
	return c.exitWith(res, "")
}

// terminalFd returns r's file descriptor when r is a terminal.
func terminalFd(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}
