package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/api"
)

// barWidth is the number of cells in a progress bar.
const barWidth = 30

// progressBar draws one line per phase of an image import on a terminal, redrawing it in
// place (carriage return, clear to end of line) only when what it shows changes. Once
// the upload is sent, a status line says the daemon is unpacking until its first event
// of that phase replaces it. Its methods may be called from several goroutines.
type progressBar struct {
	w io.Writer

	mu       sync.Mutex
	phase    string
	shown    string
	uploaded bool
}

// unpackingStatus stands on the line of the unpack phase until the daemon reports it.
const unpackingStatus = "unpack   unpacking…"

func (b *progressBar) update(ev api.ImportEvent) {
	if ev.Phase == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ev.Phase == "upload" && b.uploaded {
		return // the status line stands for the rest
	}
	b.draw(ev.Phase, renderProgress(ev))
	if ev.Phase == "upload" && ev.Total > 0 && ev.Done >= ev.Total {
		b.uploadDone()
	}
}

// sent says the whole archive was handed to the daemon.
func (b *progressBar) sent() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.uploaded && b.phase == "upload" {
		b.uploadDone()
	}
}

func (b *progressBar) uploadDone() {
	b.uploaded = true
	b.draw("unpack", unpackingStatus)
}

func (b *progressBar) draw(phase, line string) {
	if phase == b.phase && line == b.shown {
		return
	}
	if b.phase != "" && phase != b.phase {
		fmt.Fprintln(b.w)
	}
	b.phase, b.shown = phase, line
	fmt.Fprintf(b.w, "\r%s\x1b[K", line)
}

// finish ends the last line; the status line, if nothing replaced it, is cleared. It
// may be called more than once.
func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.shown == unpackingStatus:
		fmt.Fprint(b.w, "\r\x1b[K")
	case b.phase != "":
		fmt.Fprintln(b.w)
	}
	b.phase, b.shown = "", ""
}

// eofReader calls atEOF when its reader is exhausted: the upload of an archive of
// unknown size ended.
type eofReader struct {
	r     io.Reader
	atEOF func()
}

func (e eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && n == 0 {
		e.atEOF()
	}
	return n, err
}

// renderProgress is "upload  [=========>          ]  45%  120MiB / 260MiB", or the phase
// and the bytes done when the total is unknown.
func renderProgress(ev api.ImportEvent) string {
	if ev.Total <= 0 {
		return fmt.Sprintf("%-8s %s", ev.Phase, formatSize(ev.Done))
	}
	done := min(max(ev.Done, 0), ev.Total)
	cells := int(done * barWidth / ev.Total)
	bar := strings.Repeat("=", cells)
	if cells < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-cells-1)
	}
	return fmt.Sprintf("%-8s [%s] %3d%%  %s / %s", ev.Phase, bar, done*100/ev.Total, formatSize(done), formatSize(ev.Total))
}
