package api

import (
	"bytes"

	fastjson "github.com/segmentio/encoding/json"
)

// A list of sandboxes can hold tens of thousands of records, and encoding/json spends
// most of a large listing's time in reflection on both ends. The list's body goes
// through github.com/segmentio/encoding/json instead: the same bytes as encoding/json
// for these types (it reads the same tags; TestSandboxListCodec holds both to one
// output and checks that no type in a list uses what it does not implement, such as
// omitzero).

// EncodeSandboxList is l as JSON, without escaping HTML, ending in a newline: what
// encoding/json's Encoder with SetEscapeHTML(false) writes.
func EncodeSandboxList(l *SandboxList) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(512 * (len(l.Sandboxes) + 1))
	enc := fastjson.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// DecodeSandboxList reads the JSON of a SandboxList, as encoding/json.Unmarshal does.
func DecodeSandboxList(data []byte, l *SandboxList) error {
	return fastjson.Unmarshal(data, l)
}
