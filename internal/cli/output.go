package cli

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock/api"
)

// now is the clock ages are measured against; tests replace it.
var now = time.Now

// table writes aligned columns; what reaches w has passed termSafe. Flush writes the
// whole table at once: a tabwriter writes every cell and every gap on its own, a write
// to the terminal each.
type table struct {
	*tabwriter.Writer
	buf bytes.Buffer
	w   io.Writer
}

func newTable(w io.Writer) *table {
	t := &table{w: w}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

// Flush aligns what was written since the last Flush and writes it to w.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	_, err := safeWriter{t.w}.Write(t.buf.Bytes())
	t.buf.Reset()
	return err
}

// formatSize prints bytes in powers of 1024: 512MiB, 1.5GiB.
func formatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + units[i]
}

// orDash prints "-" for a zero limit (none set).
func orDash[T int64 | float64](v T, format func(T) string) string {
	if v == 0 {
		return "-"
	}
	return format(v)
}

func formatCPU(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
func formatInt(v int64) string   { return strconv.FormatInt(v, 10) }

// formatAge prints how long ago t was: 45s, 12m, 5h, 3d.
func formatAge(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now().Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// formatMap prints K=V pairs sorted by key.
func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	return kvFlag(m).String()
}

// shortDigest keeps the algorithm and the first 12 hex digits.
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) <= 12 {
		return d
	}
	return alg + ":" + hex[:12]
}

// printSandboxRow prints the short table create uses.
func printSandboxRow(w io.Writer, sb *api.Sandbox) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tID\tSTATE\tIMAGE\tGEN")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", sb.Name, sb.ID, sb.State, sb.Image, sb.Generation)
	return tw.Flush()
}

// printFields prints key: value lines, aligned.
func printFields(w io.Writer, fields [][2]string) error {
	tw := newTable(w)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	return tw.Flush()
}

// printOperation prints an operation as key: value lines.
func printOperation(w io.Writer, op *api.Operation, sb *api.Sandbox) error {
	fields := [][2]string{{"operation", op.ID}, {"kind", op.Kind}, {"state", op.State}}
	if sb != nil {
		fields = append(fields, [2]string{"sandbox", sb.Name + " (" + sb.ID + ", " + sb.State + ")"})
	} else if op.SandboxID != "" {
		fields = append(fields, [2]string{"sandbox", op.SandboxID})
	}
	fields = append(fields, [2]string{"created", formatTime(op.CreatedAt)}, [2]string{"updated", formatTime(op.UpdatedAt)})
	if op.Error != nil {
		fields = append(fields, [2]string{"error", op.Error.Message + " (" + op.Error.Code + ")"})
	}
	return printFields(w, fields)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
