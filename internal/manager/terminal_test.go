package manager

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/airlockhq/airlock/internal/agentproto"
)

func frame(t agentproto.FrameType, p string) []byte {
	var b bytes.Buffer
	agentproto.WriteFrame(&b, t, []byte(p))
	return b.Bytes()
}

// A terminal's end is read from the frames passing by, whatever pieces they come in;
// a damaged result, a state no agent sends or a header past the frame bound records
// no result.
func TestFrameScanFindsTheTerminalsEnd(t *testing.T) {
	out := append(frame(agentproto.FrameStdout, "hello"), frame(agentproto.FrameStdout, "")...)
	result := frame(agentproto.FrameResult, `{"state":"failed","exit_code":5,"error":"x"}`)
	damaged := bytes.Clone(result)
	damaged[len(damaged)-1] ^= 1
	huge := []byte{byte(agentproto.FrameStdout), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(huge[1:], agentproto.MaxPayload+1)
	cases := []struct {
		name   string
		stream []byte
		want   string
	}{
		{"output then result", append(bytes.Clone(out), result...), "failed 5"},
		{"no result", out, ""},
		{"damaged result", append(bytes.Clone(out), damaged...), ""},
		{"unknown state", frame(agentproto.FrameResult, `{"state":"pwned","exit_code":1}`), ""},
		{"oversized header", append(huge, result...), ""},
	}
	for _, c := range cases {
		for _, piece := range []int{1, 3, 7, len(c.stream)} {
			var s frameScan
			for b := c.stream; len(b) > 0; {
				k := min(piece, len(b))
				s.feed(b[:k])
				b = b[k:]
			}
			got := ""
			if s.result != nil {
				got = s.result.State + " " + string(rune('0'+s.result.ExitCode))
			}
			if got != c.want {
				t.Errorf("%s, fed %d bytes at a time: result %q; want %q", c.name, piece, got, c.want)
			}
		}
	}
}
