package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// series is one measured quantity: durations in milliseconds, or sizes in MiB.
type series struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"` // "ms" or "MiB"
	Values []float64 `json:"values"`
	Errors int       `json:"errors,omitempty"`
	Error  string    `json:"first_error,omitempty"`
}

func (s *series) addDuration(d time.Duration) {
	s.Values = append(s.Values, float64(d)/float64(time.Millisecond))
}

func (s *series) fail(err error) {
	s.Errors++
	if s.Error == "" {
		s.Error = strings.Join(strings.Fields(err.Error()), " ")
	}
}

// summary is what the table shows of a series.
type summary struct {
	Name   string `json:"name"`
	Unit   string `json:"unit"`
	N      int    `json:"n"`
	P50    num    `json:"p50"`
	P90    num    `json:"p90"`
	P99    num    `json:"p99"`
	Mean   num    `json:"mean"`
	Min    num    `json:"min"`
	Max    num    `json:"max"`
	Errors int    `json:"errors,omitempty"`
	Error  string `json:"first_error,omitempty"`
}

func (s *series) summary() summary {
	out := summary{Name: s.Name, Unit: s.Unit, N: len(s.Values), Errors: s.Errors, Error: s.Error}
	if len(s.Values) == 0 {
		nan := num(math.NaN())
		out.P50, out.P90, out.P99, out.Mean, out.Min, out.Max = nan, nan, nan, nan, nan, nan
		return out
	}
	v := append([]float64(nil), s.Values...)
	sort.Float64s(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	out.P50, out.P90, out.P99 = num(percentile(v, 50)), num(percentile(v, 90)), num(percentile(v, 99))
	out.Mean, out.Min, out.Max = num(sum/float64(len(v))), num(v[0]), num(v[len(v)-1])
	return out
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(rank, 1)
	return sorted[rank-1]
}

// target is one goal of the benchmark and how this run did against it.
type target struct {
	Name    string `json:"name"`
	Goal    string `json:"goal"`
	Value   num    `json:"value"`
	Shown   string `json:"shown"`
	Met     bool   `json:"met"`
	Skipped bool   `json:"skipped,omitempty"`
	Note    string `json:"note,omitempty"`
}

// report is everything one run measured.
type report struct {
	Date        time.Time         `json:"date"`
	Environment map[string]string `json:"environment"`
	Series      []summary         `json:"series"`
	Ratios      []ratio           `json:"ratios"`
	Targets     []target          `json:"targets"`
	Concurrency concurrencyResult `json:"concurrency"`
	Notes       []string          `json:"notes,omitempty"`
}

// ratio compares the p50 of two series: Num / Den.
type ratio struct {
	Name  string `json:"name"`
	Num   string `json:"numerator"`
	Den   string `json:"denominator"`
	Value num    `json:"value"`
}

func p50Ratio(name string, num, den summary) ratio {
	return ratio{Name: name, Num: num.Name, Den: den.Name, Value: num.P50 / den.P50}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// num is a measured number; JSON shows one that could not be measured (NaN) as null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func fmtNum[T ~float64](v T) string {
	x := float64(v)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func (r *report) writeTable(w io.Writer) {
	keys := make([]string, 0, len(r.Environment))
	for k := range r.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "Airlock benchmark, %s\n", r.Date.Format(time.RFC3339))
	for _, k := range keys {
		fmt.Fprintf(w, "  %-16s %s\n", k+":", r.Environment[k])
	}
	fmt.Fprintln(w)
	width := len("series")
	for _, s := range r.Series {
		width = max(width, utf8.RuneCountInString(s.Name))
	}
	// Names left-aligned (padded here), numbers right-aligned by the tabwriter.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tunit\tn\tp50\tp90\tp99\tmean\tmin\tmax\terrors\t\n", pad("series", width))
	for _, s := range r.Series {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", pad(s.Name, width), s.Unit, s.N,
			fmtNum(s.P50), fmtNum(s.P90), fmtNum(s.P99), fmtNum(s.Mean), fmtNum(s.Min), fmtNum(s.Max), s.Errors)
	}
	tw.Flush()
	for _, s := range r.Series {
		if s.Errors > 0 {
			fmt.Fprintf(w, "  %s: %d errors, first: %s\n", s.Name, s.Errors, s.Error)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ratios (p50 / p50):")
	for _, q := range r.Ratios {
		fmt.Fprintf(w, "  %s %6sx\n", pad(q.Name, 44), fmtNum(q.Value))
	}
	fmt.Fprintln(w)
	c := r.Concurrency
	fmt.Fprintf(w, "concurrency: %d sandboxes, at most %d calls in flight: create+exec wall %s ms, terminate wall %s ms (cleanups ended at %s ms), %d failed, leaks: %s\n",
		c.Sandboxes, c.Parallel, fmtNum(c.CreateExecWallMS), fmtNum(c.TerminateWallMS), fmtNum(c.CleanupWallMS), c.Failed, leakText(c.Leaks))
	for _, e := range c.Errors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "targets:")
	for _, t := range r.Targets {
		state := "MISSED"
		switch {
		case t.Skipped:
			state = "skipped"
		case t.Met:
			state = "met"
		}
		fmt.Fprintf(w, "  %-7s %s %-10s goal %s", state, pad(t.Name, 46), t.Shown, t.Goal)
		if t.Note != "" {
			fmt.Fprintf(w, "  (%s)", t.Note)
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	r.writeSummary(w)
}

// writeSummary is the last thing the table shows: one line per target, the value
// against its goal.
func (r *report) writeSummary(w io.Writer) {
	met, missed := 0, 0
	fmt.Fprintln(w)
	fmt.Fprintln(w, "summary:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  target\tvalue\tgoal\t\t")
	for _, t := range r.Targets {
		state := "MISSED"
		switch {
		case t.Skipped:
			state = "skipped"
		case t.Met:
			state, met = "met", met+1
		default:
			missed++
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", t.Name, t.Shown, t.Goal, state)
	}
	tw.Flush()
	fmt.Fprintf(w, "  %d met, %d missed, %d skipped\n", met, missed, len(r.Targets)-met-missed)
}

// pad right-pads s with spaces to width runes (fmt counts bytes, and names have arrows).
func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s)))
}

func leakText(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, "; ")
}
