package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/api"
)

// barWidth is the number of cells in a progress bar.
const barWidth = 30

// progressBar draws one line per phase of an image import on a terminal, redrawing it in
// place (carriage return, clear to end of line) only when what it shows changes.
type progressBar struct {
	w     io.Writer
	phase string
	shown string
}

func (b *progressBar) update(ev api.ImportEvent) {
	if ev.Phase == "" {
		return
	}
	line := renderProgress(ev)
	if ev.Phase == b.phase && line == b.shown {
		return
	}
	if b.phase != "" && ev.Phase != b.phase {
		fmt.Fprintln(b.w)
	}
	b.phase, b.shown = ev.Phase, line
	fmt.Fprintf(b.w, "\r%s\x1b[K", line)
}

// finish ends the last line.
func (b *progressBar) finish() {
	if b.phase != "" {
		fmt.Fprintln(b.w)
	}
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
