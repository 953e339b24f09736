package agent

import (
	"bytes"
	"strings"
)

// markerScanner removes an end marker line from a stream that may split it across
// chunks. The text after the marker on its line is the status.
type markerScanner struct {
	marker []byte
	hold   []byte
	found  bool
}

// maxStatus bounds what is held after a marker while waiting for its newline.
const maxStatus = 256

// feed returns the bytes to forward and, once the marker line is complete, found and
// the status. Bytes after the marker line are dropped; bytes after found pass through.
func (m *markerScanner) feed(b []byte) (emit []byte, found bool, status string) {
	if m.found {
		return b, false, ""
	}
	buf := append(m.hold, b...)
	m.hold = nil
	if i := bytes.Index(buf, m.marker); i >= 0 {
		rest := buf[i+len(m.marker):]
		if j := bytes.IndexByte(rest, '\n'); j >= 0 || len(rest) > maxStatus {
			if j < 0 {
				j = len(rest)
			}
			m.found = true
			return buf[:i], true, strings.TrimSpace(string(rest[:j]))
		}
		m.hold = bytes.Clone(buf[i:])
		return buf[:i], false, ""
	}
	k := min(len(m.marker)-1, len(buf))
	for ; k > 0; k-- {
		if bytes.HasSuffix(buf, m.marker[:k]) {
			break
		}
	}
	m.hold = bytes.Clone(buf[len(buf)-k:])
	return buf[:len(buf)-k], false, ""
}
