package api

import (
	fastjson "github.com/segmentio/encoding/json"
)

// A list of sandboxes can hold tens of thousands of records, and encoding/json spends
// most of a large listing's time in reflection on both ends. The list's body goes
// through github.com/segmentio/encoding/json instead: the same bytes as encoding/json
// for these types (it reads the same tags; TestSandboxListCodec holds both to one
// output and checks that no type in a list uses what it does not implement, such as
// omitzero).

// listFlags are encoding/json's Encoder's with SetEscapeHTML(false): map keys
// sorted, nothing escaped for HTML.
const listFlags = fastjson.SortMapKeys

// EncodeSandboxList is l as JSON, without escaping HTML, ending in a newline: what
// encoding/json's Encoder with SetEscapeHTML(false) writes.
func EncodeSandboxList(l *SandboxList) ([]byte, error) {
	b, err := fastjson.Append(make([]byte, 0, 1024*(len(l.Sandboxes)+1)), l, listFlags)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// SandboxListWriter writes what EncodeSandboxList writes of a list with a non-nil
// Sandboxes, one record at a time: a server's page of thousands is never held as
// []Sandbox, and its bytes go into a buffer the caller may reuse.
type SandboxListWriter struct {
	b []byte
	n int
}

// NewSandboxListWriter starts a list in buf[:0].
func NewSandboxListWriter(buf []byte) *SandboxListWriter {
	return &SandboxListWriter{b: append(buf[:0], `{"sandboxes":[`...)}
}

// Add writes sb as the list's next record.
func (w *SandboxListWriter) Add(sb *Sandbox) error {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	b, err := AppendSandbox(w.b, sb)
	if err != nil {
		return err
	}
	w.b, w.n = b, w.n+1
	return nil
}

// AddJSON writes a record AppendSandbox wrote as the list's next.
func (w *SandboxListWriter) AddJSON(sb []byte) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.b, w.n = append(w.b, sb...), w.n+1
}

// AppendSandbox appends sb's JSON as a list holds it.
func AppendSandbox(b []byte, sb *Sandbox) ([]byte, error) {
	return fastjson.Append(b, sb, listFlags)
}

// Finish ends the list with next (omitted when "") and returns its bytes.
func (w *SandboxListWriter) Finish(next string) ([]byte, error) {
	w.b = append(w.b, ']')
	if next != "" {
		b, err := fastjson.Append(append(w.b, `,"next":`...), next, listFlags)
		if err != nil {
			return nil, err
		}
		w.b = b
	}
	w.b = append(w.b, "}\n"...)
	return w.b, nil
}

// DecodeSandboxList reads the JSON of a SandboxList, as encoding/json.Unmarshal does.
func DecodeSandboxList(data []byte, l *SandboxList) error {
	return fastjson.Unmarshal(data, l)
}
