package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullSandbox sets every field of a Sandbox, with strings that need escaping.
func fullSandbox(i int) Sandbox {
	at := time.Date(2026, 12, 6, 14, 0, 0, 123456789+i, time.UTC)
	local := at.In(time.FixedZone("x", 3600+1800))
	return Sandbox{
		ID: "sb_" + strings.Repeat("a", i%5), Name: "n<&>\"\\\u2028\u2029\x01\x7f é 😀\xff", Owner: "o", State: StateSuspended,
		Image: "img", ImageDigest: "sha256:00", Node: "node-1", Runtime: "runc", Role: "dev",
		Limits: Limits{CPU: 0.25 + float64(i), Memory: 1 << 30, PIDs: 1024, OpenFiles: 65536, Disk: 1e10},
		Env:    map[string]string{"B": "2", "A": "1\n", "<": ">"}, Labels: map[string]string{"team": "x&y", "": ""},
		Generation: 3, Version: -4, CreatedAt: at, LastActivity: local, ExpiresAt: time.Time{},
		IdleSuspend: "10m0s", TTL: "168h0m0s", SuspendedAt: &at, LostAt: &local, FilesAt: &at, Failure: "f",
		Network:   NetworkPolicy{Mode: "allowlist", Allow: []string{"*.example.com/GET"}, AllowPrivate: []string{"10.0.0.0/8"}},
		Workspace: &Workspace{Path: "/w", Access: "ro"}, Parent: "snap_1", ForkedFrom: "sb_p",
	}
}

// TestSandboxListCodec holds the list's codec to encoding/json: the same bytes out, the
// same values in, for records with every field set, with none set, and with numbers
// whose formatting differs by size.
func TestSandboxListCodec(t *testing.T) {
	l := SandboxList{Next: "cursor<&>"}
	for i := range 4 {
		l.Sandboxes = append(l.Sandboxes, fullSandbox(i))
	}
	l.Sandboxes = append(l.Sandboxes, Sandbox{}, Sandbox{Limits: Limits{CPU: 1e21}}, Sandbox{Limits: Limits{CPU: 1e-7}}, Sandbox{Limits: Limits{CPU: 123456789.5}})
	one := SandboxList{Sandboxes: l.Sandboxes[:1]}
	for _, list := range []SandboxList{l, {}, {Sandboxes: []Sandbox{}}, one} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&list); err != nil {
			t.Fatal(err)
		}
		got, err := EncodeSandboxList(&list)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("EncodeSandboxList differs from encoding/json:\n got %s\nwant %s", got, want.Bytes())
		}
		if list.Sandboxes != nil {
			w := NewSandboxListWriter([]byte("left over from an earlier list"))
			for i := range list.Sandboxes {
				if i%2 == 0 {
					if err := w.Add(&list.Sandboxes[i]); err != nil {
						t.Fatal(err)
					}
					continue
				}
				b, err := AppendSandbox([]byte("x"), &list.Sandboxes[i])
				if err != nil {
					t.Fatal(err)
				}
				w.AddJSON(b[1:])
			}
			got, err := w.Finish(list.Next)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("SandboxListWriter differs from encoding/json:\n got %s\nwant %s", got, want.Bytes())
			}
		}
		var back, wantBack SandboxList
		if err := DecodeSandboxList(got, &back); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &wantBack); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, wantBack) {
			t.Fatalf("DecodeSandboxList differs from encoding/json:\n got %+v\nwant %+v", back, wantBack)
		}
	}
	for _, bad := range []string{`{"sandboxes":[{"id":1}]}`, `{"sandboxes":[`, `[]x`} {
		var got SandboxList
		if err := DecodeSandboxList([]byte(bad), &got); err == nil {
			t.Errorf("DecodeSandboxList(%s) = nil error, want one (encoding/json refuses it)", bad)
		}
	}
}

// TestSandboxListTypes fails when a type in a list uses what the list's codec does not
// implement as encoding/json does: the omitzero option, or a type with its own JSON or
// text methods (time.Time aside). Such a field needs the codec checked again first.
func TestSandboxListTypes(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, at string) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		if ty == reflect.TypeFor[time.Time]() {
			return
		}
		if ty.Kind() == reflect.Pointer {
			walk(ty.Elem(), at)
			return
		}
		for _, i := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[json.Unmarshaler](),
			reflect.TypeFor[encoding.TextMarshaler](), reflect.TypeFor[encoding.TextUnmarshaler]()} {
			if ty.Implements(i) || reflect.PointerTo(ty).Implements(i) {
				t.Errorf("%s (%s) implements %s: check EncodeSandboxList and DecodeSandboxList against encoding/json for it", at, ty, i)
			}
		}
		switch ty.Kind() {
		case reflect.Slice, reflect.Array:
			walk(ty.Elem(), at)
		case reflect.Map:
			walk(ty.Key(), at)
			walk(ty.Elem(), at)
		case reflect.Struct:
			for f := range ty.Fields() {
				if strings.Contains(f.Tag.Get("json"), "omitzero") {
					t.Errorf("%s.%s uses omitzero, which the list's codec does not implement", at, f.Name)
				}
				walk(f.Type, at+"."+f.Name)
			}
		case reflect.Interface:
			t.Errorf("%s is an interface: its values' types cannot be checked here", at)
		}
	}
	walk(reflect.TypeFor[SandboxList](), "SandboxList")
}
