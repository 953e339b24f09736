package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Text a sandbox wrote (an agent's error, a command's failure, a file or host name in an
// event or egress record) is hostile: an escape sequence in it would reach the user's
// terminal. Everything the CLI prints other than a command's own output goes through
// termSafe (or safeWriter, or jsonSafe for JSON), which keeps newlines and tabs and
// shows every other control character visibly instead of sending it.

// termSafe replaces control characters (C0 but \n and \t, DEL, C1), bidirectional
// overrides, line and paragraph separators and bytes that are not UTF-8 with visible
// escapes such as \x1b and \u202e.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || unsafeRune(r) {
			return true
		}
		i += size
	}
	return false
}

// unsafeRune reports characters a terminal acts on or that reorder what it shows.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028 || r == 0x2029, r == 0x200e || r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// safeWriter passes text through termSafe; tables and listings write through it.
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, termSafe(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonSafe escapes, inside JSON that encoding/json wrote, the characters it leaves raw
// but a terminal acts on (DEL, C1 controls, bidirectional overrides). The JSON means the
// same; only its spelling changes.
func jsonSafe(b []byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if size > 0 && r != utf8.RuneError && unsafeRune(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.Write(b[i : i+size])
		}
		i += size
	}
	return out.Bytes()
}
