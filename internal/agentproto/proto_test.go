package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func encodeFrame(t testing.TB, ft FrameType, p []byte) []byte {
	var b bytes.Buffer
	if err := WriteFrame(&b, ft, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		t       FrameType
		payload []byte
	}{
		{"empty", FrameEnd, nil},
		{"small", FrameStdout, []byte("hello")},
		{"max", FrameData, bytes.Repeat([]byte{7}, MaxPayload)},
	}
	for _, tt := range tests {
		b := encodeFrame(t, tt.t, tt.payload)
		if got, want := len(b), 9+len(tt.payload); got != want {
			t.Errorf("%s: encoded %d bytes, want %d", tt.name, got, want)
		}
		gt, gp, err := ReadFrame(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: ReadFrame: %v", tt.name, err)
		}
		if gt != tt.t || !bytes.Equal(gp, tt.payload) {
			t.Errorf("%s: got (%q, %d bytes), want (%q, %d bytes)", tt.name, gt, len(gp), tt.t, len(tt.payload))
		}
	}
}

func TestReadFrameDamage(t *testing.T) {
	good := encodeFrame(t, FrameStdout, []byte("payload"))
	tests := []struct {
		name string
		edit func([]byte) []byte
		want error
	}{
		{"type flipped", func(b []byte) []byte { b[0] = 'E'; return b }, ErrChecksum},
		{"payload flipped", func(b []byte) []byte { b[6] ^= 1; return b }, ErrChecksum},
		{"checksum flipped", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, ErrChecksum},
		{"truncated payload", func(b []byte) []byte { return b[:8] }, io.ErrUnexpectedEOF},
		{"truncated header", func(b []byte) []byte { return b[:3] }, io.ErrUnexpectedEOF},
		{"empty", func(b []byte) []byte { return nil }, io.EOF},
		{"oversize", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[1:], MaxPayload+1)
			return b
		}, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		b := tt.edit(bytes.Clone(good))
		_, _, err := ReadFrame(bytes.NewReader(b))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got error %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := WriteFrame(io.Discard, FrameData, make([]byte, MaxPayload+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("WriteFrame(oversize): got %v, want ErrFrameTooLarge", err)
	}
}

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		in      string
		wantErr bool
	}{
		{`{"op":"ping"}`, false},
		{`{"op":"exec","exec":{"argv":["true"],"timeout_ms":5}}`, false},
		{`{"op":"ping","bogus":1}`, true},
		{`{"op":"exec","exec":{"argv":["true"],"bogus":1}}`, true},
		{`{"op":"ping"} {"op":"ping"}`, true},
		{`{"op":"ping"}}`, true},
		{`not json`, true},
		{``, true},
	}
	for _, tt := range tests {
		_, err := DecodeRequest([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("DecodeRequest(%s): got error %v, want error %v", tt.in, err, tt.wantErr)
		}
	}
}

func TestFileInfoCheck(t *testing.T) {
	tests := []struct {
		name string
		fi   FileInfo
		stat bool
		ok   bool
	}{
		{"plain", FileInfo{Name: "a.txt", Mode: 0o644}, false, true},
		{"longest name", FileInfo{Name: strings.Repeat("n", maxFileName)}, false, true},
		{"root by stat", FileInfo{Name: "/"}, true, true},
		{"root in a listing", FileInfo{Name: "/"}, false, false},
		{"name past NAME_MAX", FileInfo{Name: strings.Repeat("n", maxFileName+1)}, false, false},
		{"megabyte name by stat", FileInfo{Name: strings.Repeat("n", MaxPayload/2)}, true, false},
		{"dot dot", FileInfo{Name: ".."}, false, false},
		{"slash", FileInfo{Name: "a/b"}, false, false},
		{"negative size", FileInfo{Name: "a", Size: -1}, false, false},
		{"mode past 07777", FileInfo{Name: "a", Mode: 0o10000}, false, false},
	}
	for _, tt := range tests {
		err := tt.fi.Check(tt.stat)
		if tt.ok != (err == nil) {
			t.Errorf("%s: Check(%v) = %v; want ok %v", tt.name, tt.stat, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrBadReply) || len(err.Error()) > 512) {
			t.Errorf("%s: Check(%v) = %.200v (%d bytes); want ErrBadReply of at most 512 bytes", tt.name, tt.stat, err, len(err.Error()))
		}
	}
}
