package agent

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRateLimitedWriterBoundsAndCounts(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	w := newRateLimitedWriter(&out, 100, 300)
	w.now = func() time.Time { return now }
	line := []byte(strings.Repeat("x", 99) + "\n") // 100 bytes
	for i := 0; i < 10; i++ {
		if n, err := w.Write(line); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil (drops are silent to the caller)", n, err, len(line))
		}
	}
	if out.Len() != 300 {
		t.Fatalf("after a burst of 10 lines, %d bytes written; want the 300-byte burst", out.Len())
	}
	now = now.Add(time.Second) // 100 bytes of allowance: one more line
	w.Write(line)
	if !strings.Contains(out.String(), "agent: 7 log records dropped") {
		t.Fatalf("the next line that passes must report the 7 dropped; got %q", out.String()[300:])
	}
	long := bytes.Repeat([]byte("y"), 10*maxLogLine)
	now = now.Add(time.Hour)
	out.Reset()
	w.Write(long)
	if out.Len() > maxLogLine {
		t.Fatalf("one record wrote %d bytes; want at most %d", out.Len(), maxLogLine)
	}
}
