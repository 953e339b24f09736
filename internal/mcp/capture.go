package mcp

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// capture collects one output stream of a command for a tool's answer. It keeps the
// first limit bytes and a window of the last ones, so what it shows is bounded however
// much the command writes: the whole stream when it fits, else its head and tail around
// a marked cut. Once the stream outgrows limit it also copies everything (up to maxFull
// bytes) into a temporary file on this host, from which the whole stream can be put into
// the sandbox. Write never fails: a problem with the file only loses the full copy.
type capture struct {
	limit   int
	maxFull int64

	first []byte // the first limit bytes
	last  []byte // at least the last tailSize bytes, once the stream is longer than limit
	total int64

	full     *os.File // the whole stream, once it outgrew limit
	fullSize int64
	fullErr  error
}

func newCapture(limit int, maxFull int64) *capture {
	return &capture{limit: limit, maxFull: maxFull}
}

func (c *capture) headSize() int { return c.limit / 2 }
func (c *capture) tailSize() int { return c.limit - c.headSize() }

func (c *capture) Write(p []byte) (int, error) {
	if c.full == nil && c.fullErr == nil && c.total+int64(len(p)) > int64(c.limit) {
		c.startFull()
	}
	if c.full != nil {
		c.writeFull(p)
	}
	if room := c.limit - len(c.first); room > 0 {
		c.first = append(c.first, p[:min(room, len(p))]...)
	}
	c.last = append(c.last, p...)
	if tail := c.tailSize(); len(c.last) > 2*tail {
		c.last = append(c.last[:0], c.last[len(c.last)-tail:]...)
	}
	c.total += int64(len(p))
	return len(p), nil
}

// startFull opens the file of the whole stream and puts what came so far (all of it
// still in first) into it.
func (c *capture) startFull() {
	f, err := os.CreateTemp("", "airlock-mcp-*")
	if err != nil {
		c.fullErr = err
		return
	}
	os.Remove(f.Name()) // the open file is all that is needed; nothing is left behind
	c.full = f
	c.writeFull(c.first)
}

func (c *capture) writeFull(p []byte) {
	if c.fullErr != nil {
		return
	}
	if room := c.maxFull - c.fullSize; int64(len(p)) > room {
		p = p[:max(room, 0)]
	}
	n, err := c.full.Write(p)
	c.fullSize += int64(n)
	if err != nil {
		c.fullErr = err
	}
}

// truncated reports whether the stream was longer than what is shown.
func (c *capture) truncated() bool { return c.total > int64(c.limit) }

// fullFile returns the file holding the stream from its start, rewound, and how many
// bytes it holds (fewer than the stream's when it passed maxFull), or an error.
func (c *capture) fullFile() (*os.File, int64, error) {
	if c.full == nil {
		return nil, 0, fmt.Errorf("the output was not kept: %w", c.fullErr)
	}
	if c.fullErr != nil {
		return nil, 0, fmt.Errorf("the output could not be kept: %w", c.fullErr)
	}
	if _, err := c.full.Seek(0, 0); err != nil {
		return nil, 0, err
	}
	return c.full, c.fullSize, nil
}

// close releases the file of the whole stream.
func (c *capture) close() {
	if c.full != nil {
		c.full.Close()
	}
}

// shown returns the text to show: the whole stream, or its head and tail with note
// between them. Invalid UTF-8 (binary output) shows as U+FFFD.
func (c *capture) shown(note string) string {
	if !c.truncated() {
		return strings.ToValidUTF8(string(c.first), "\uFFFD")
	}
	head := c.head()
	var b strings.Builder
	b.WriteString(strings.ToValidUTF8(string(head), "\uFFFD"))
	if len(head) > 0 && head[len(head)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(note)
	b.WriteByte('\n')
	b.WriteString(strings.ToValidUTF8(string(c.tail()), "\uFFFD"))
	return b.String()
}

// head and tail are the two ends of a truncated stream that shown shows, cut at
// UTF-8 sequence boundaries.
func (c *capture) head() []byte {
	return trimPartialRuneEnd(c.first[:min(c.headSize(), len(c.first))])
}

func (c *capture) tail() []byte {
	return trimPartialRuneStart(c.last[max(len(c.last)-c.tailSize(), 0):])
}

// trimPartialRuneEnd drops the bytes of a UTF-8 sequence that b cuts at its end.
func trimPartialRuneEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// trimPartialRuneStart drops the continuation bytes that b starts with (at most three),
// the rest of a UTF-8 sequence cut before b.
func trimPartialRuneStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return b
}
