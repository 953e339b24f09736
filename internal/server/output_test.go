package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockhq/airlock/api"
)

// encodedResult is the size of the response a non-streamed call with this output sends.
func encodedResult(t *testing.T, stdout, stderr *collector) (int, *api.ExecResult) {
	t.Helper()
	out := &api.ExecResult{State: "succeeded"}
	setOutput(out, stdout, stderr)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	empty, _ := json.Marshal(api.ExecResult{State: "succeeded", Truncated: true, StdoutDropped: out.StdoutDropped, StderrDropped: out.StderrDropped})
	return b.Len() - len(empty), out
}

func TestCollectorBoundsEncodedSize(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name  string
		chunk []byte
	}{
		{"NUL bytes", make([]byte, 64<<10)},
		{"quotes and newlines", bytes.Repeat([]byte("\"\\\n"), 20000)},
		{"line separators", []byte(strings.Repeat("\u2028", 20000))},
		{"not UTF-8", bytes.Repeat([]byte{0xff, 'a', 'b'}, 20000)},
		{"plain text", bytes.Repeat([]byte("hello world\n"), 5000)},
		{"two-byte characters", []byte(strings.Repeat("é", 30000))},
	} {
		budget := newOutputBudget(DefaultOutputBudget)
		stdout, stderr := newCollector(limit, budget), newCollector(limit, budget)
		var total int64
		for total < 8*limit {
			stdout.Write(tc.chunk)
			stderr.Write(tc.chunk)
			total += int64(len(tc.chunk))
		}
		size, out := encodedResult(t, stdout, stderr)
		if size > 2*limit+64 { // two fields, each within limit, plus their names
			t.Errorf("%s: %d bytes written per stream gave a %d-byte response body; want at most %d", tc.name, total, size, 2*limit+64)
		}
		if !out.Truncated || out.StdoutDropped+int64(len(out.Stdout)+len(out.StdoutBytes)) != total {
			t.Errorf("%s: truncated=%v, kept %d + dropped %d; want truncated and the two to add up to %d",
				tc.name, out.Truncated, len(out.Stdout)+len(out.StdoutBytes), out.StdoutDropped, total)
		}
		if utf8.Valid(tc.chunk) && out.StdoutBytes != nil {
			t.Errorf("%s: text output came back as bytes: the cut split a character", tc.name)
		}
		stdout.release()
		stderr.release()
		if budget.left != DefaultOutputBudget {
			t.Errorf("%s: budget after release = %d; want all %d back", tc.name, budget.left, DefaultOutputBudget)
		}
	}
}

func TestCollectorKeepsShortOutputWhole(t *testing.T) {
	c := newCollector(DefaultOutputLimit, newOutputBudget(DefaultOutputBudget))
	c.Write([]byte("a\x00b\n"))
	out := &api.ExecResult{}
	setOutput(out, c, newCollector(1, newOutputBudget(1)))
	if out.Stdout != "a\x00b\n" || out.Truncated || out.StdoutDropped != 0 {
		t.Errorf("short output: %+v; want it whole and not truncated", out)
	}
}

func TestOutputBudgetIsShared(t *testing.T) {
	const limit = 1 << 20
	budget := newOutputBudget(3 * limit) // room for one call's output and half of another's
	a, b := newCollector(limit, budget), newCollector(limit, budget)
	big := bytes.Repeat([]byte("a"), 4*limit)
	a.Write(big)
	b.Write(big)
	if a.held+b.held > 3*limit || budget.left < 0 {
		t.Errorf("collectors hold %d bytes from a budget of %d", a.held+b.held, 3*limit)
	}
	if b.buf.Len() >= a.buf.Len() {
		t.Errorf("second call kept %d bytes, first %d; want the second cut earlier by the spent budget", b.buf.Len(), a.buf.Len())
	}
	a.release()
	c := newCollector(limit, budget)
	c.Write(big)
	if c.buf.Len() != a.buf.Len() {
		t.Errorf("after the first call released its memory a new call kept %d bytes; want %d", c.buf.Len(), a.buf.Len())
	}
	b.release()
	c.release()
	if budget.left != 3*limit {
		t.Errorf("budget after every release = %d; want %d", budget.left, 3*limit)
	}
}
