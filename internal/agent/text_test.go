package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/agentproto"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/", ".", true},
		{"/a", "a", true},
		{"/a/b.txt", "a/b.txt", true},
		{"", "", false},
		{"a", "", false},
		{"/a/../b", "", false},
		{"/..", "", false},
		{"/a/./b", "", false},
		{"/a//b", "", false},
		{"/a/", "", false},
		{"/a\x00b", "", false},
	}
	for _, tt := range tests {
		got, err := checkPath(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("checkPath(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestMarkerScanner(t *testing.T) {
	const marker = "__END__"
	stream := "hello" + marker + " 42\nafter"
	for split := 0; split <= len(stream); split++ {
		for split2 := split; split2 <= len(stream); split2++ {
			m := &markerScanner{marker: []byte(marker)}
			var out bytes.Buffer
			var found bool
			var status string
			for _, part := range []string{stream[:split], stream[split:split2], stream[split2:]} {
				if found {
					break
				}
				emit, f, st := m.feed([]byte(part))
				out.Write(emit)
				found, status = f, st
			}
			if !found || status != "42" || out.String() != "hello" {
				t.Fatalf("splits %d,%d: got out %q found %v status %q; want %q true %q",
					split, split2, out.String(), found, status, "hello", "42")
			}
		}
	}
	// A partial marker that turns out not to be one is passed on.
	m := &markerScanner{marker: []byte(marker)}
	var out bytes.Buffer
	for _, part := range []string{"a__E", "Nx", "tail"} {
		emit, found, _ := m.feed([]byte(part))
		if found {
			t.Fatalf("found a marker in %q", part)
		}
		out.Write(emit)
	}
	out.Write(m.hold)
	if got, want := out.String(), "a__ENxtail"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"})
	if want := []string{"A=1", "B=3", "C=4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mergeEnv: got %v, want %v", got, want)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(f, agentproto.FrameRequest, []byte(`{"op":"ping"}`)))
	f.Add(encodeFrame(f, agentproto.FrameEnd, nil))
	f.Add([]byte{'Q', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		ft, p, err := agentproto.ReadFrame(r)
		if err != nil {
			return
		}
		if len(p) > agentproto.MaxPayload {
			t.Fatalf("payload of %d bytes accepted", len(p))
		}
		consumed := b[:len(b)-r.Len()]
		if re := encodeFrame(t, ft, p); !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoding differs: got %x, want %x", re, consumed)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"op":"ping"}`))
	f.Add([]byte(`{"op":"exec","exec":{"argv":["sh","-c","x"],"env":["A=1"],"uid":0,"timeout_ms":10}}`))
	f.Add([]byte(`{"op":"session.start","session":{"kind":"python"}}`))
	f.Add([]byte(`{"op":"file.upload","path":"/a","mode":420,"uid":-1,"gid":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := agentproto.DecodeRequest(b)
		if err != nil {
			return
		}
		enc, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := agentproto.DecodeRequest(enc)
		if err != nil {
			t.Fatalf("decode of re-encoded %s: %v", enc, err)
		}
		if !reflect.DeepEqual(normalize(req), normalize(again)) {
			t.Fatalf("round trip differs:\n got %+v\nwant %+v", again, req)
		}
		_, _ = checkPath(req.Path)
		if req.Session != nil {
			_, _ = sessionArgv(req.Session)
		}
		if req.Exec != nil {
			_, _ = execArgv(req.Exec)
		}
	})
}

// normalize treats nil and empty slices alike, as JSON's omitempty does.
func normalize(r *agentproto.Request) string {
	b, _ := json.Marshal(r)
	return strings.TrimSpace(string(b))
}
