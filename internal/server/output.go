package server

import (
	"bytes"
	"sync"
	"unicode/utf8"

	"github.com/airlockhq/airlock/api"
)

// Defaults for the output a non-streamed exec or send buffers before it answers.
const (
	// DefaultOutputLimit bounds one call's output, per stream, by its encoded size in the
	// JSON response.
	DefaultOutputLimit = 16 << 20
	// DefaultOutputBudget bounds the output all non-streamed calls of the daemon buffer at
	// once.
	DefaultOutputBudget = 64 << 20
	// readFactor times the output limit is how much a non-streamed call reads from the
	// sandbox in all before it stops the command.
	readFactor = 8
)

// outputBudget is the daemon-wide memory a non-streamed call's buffered output may use:
// the bytes kept and their encoded copy. A call that cannot get more keeps what it has
// and drops the rest, so output never grows a buffer the budget did not grant.
type outputBudget struct {
	mu   sync.Mutex
	left int64
}

func newOutputBudget(n int64) *outputBudget { return &outputBudget{left: n} }

// take grants up to want bytes, possibly none.
func (b *outputBudget) take(want int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(want, b.left)
	if n < 0 {
		n = 0
	}
	b.left -= n
	return n
}

func (b *outputBudget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}

// grantStep is how much a collector asks the budget for at a time.
const grantStep = 256 << 10

// collector keeps the head of one stream of a non-streamed call: bytes are kept while
// their size in the JSON response stays within limit and the budget grants memory for
// them; the rest is counted and dropped. The cut falls on a character boundary, so text
// output stays text.
type collector struct {
	limit   int64
	budget  *outputBudget
	buf     bytes.Buffer
	cost    int64 // encoded size of buf as a JSON string
	held    int64 // granted by budget
	dropped int64
	full    bool
}

func newCollector(limit int64, budget *outputBudget) *collector {
	return &collector{limit: limit, budget: budget}
}

// encoded is the size buf takes in the response: as a JSON string, or as base64 when it
// is not valid UTF-8, whichever is larger.
func (c *collector) encoded(raw, cost int64) int64 { return max(cost, (raw*4+2)/3) }

// need is the memory kept output of raw bytes and cost costs: itself and its encoding.
func (c *collector) need(raw, cost int64) int64 { return raw + c.encoded(raw, cost) }

func (c *collector) Write(p []byte) (int, error) {
	if c.full {
		c.dropped += int64(len(p))
		return len(p), nil
	}
	raw, cost := int64(c.buf.Len()), c.cost
	n := 0
	for n < len(p) {
		bc := byteCost(p[n])
		if c.encoded(raw+1, cost+bc) > c.limit {
			break
		}
		if need := c.need(raw+1, cost+bc); need > c.held {
			got := c.budget.take(min(grantStep, 2*c.limit-c.held))
			c.held += got
			if need > c.held {
				break
			}
		}
		raw, cost = raw+1, cost+bc
		n++
	}
	if n < len(p) {
		c.full = true
		// Step back to the start of a character so a cut never splits one.
		for k := 0; k < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(p[n]); k++ {
			n--
		}
		cost = c.cost
		for _, b := range p[:n] {
			cost += byteCost(b)
		}
	}
	c.buf.Write(p[:n])
	c.cost = cost
	c.dropped += int64(len(p) - n)
	return len(p), nil
}

// release returns the collector's memory to the budget; call it once the response is
// written.
func (c *collector) release() {
	c.budget.give(c.held)
	c.held = 0
}

// byteCost is what one byte of output costs inside a JSON string written without HTML
// escaping: control characters become \u00XX, quote, backslash, \n, \r and \t two bytes,
// and 0xE2 (the lead byte of U+2028 and U+2029, escaped as \u2028) is charged four so
// that those three-byte characters are paid for in full.
func byteCost(b byte) int64 {
	switch {
	case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
		return 2
	case b < 0x20:
		return 6
	case b == 0xE2:
		return 4
	}
	return 1
}

// setOutput puts collected output in the text fields, or the byte fields when it is
// not valid UTF-8, and says what was dropped.
func setOutput(out *api.ExecResult, stdout, stderr *collector) {
	if b := stdout.buf.Bytes(); utf8.Valid(b) {
		out.Stdout = string(b)
	} else {
		out.StdoutBytes = b
	}
	if b := stderr.buf.Bytes(); utf8.Valid(b) {
		out.Stderr = string(b)
	} else {
		out.StderrBytes = b
	}
	out.StdoutDropped, out.StderrDropped = stdout.dropped, stderr.dropped
	out.Truncated = stdout.dropped > 0 || stderr.dropped > 0
}
