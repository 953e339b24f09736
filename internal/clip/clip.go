// Package clip cuts text that came from outside (a sandbox, an agent, an owner) to a
// size a log line or a stored record can hold, saying how long it was.
package clip

import (
	"fmt"
	"unicode/utf8"
)

// Text cuts s to at most n bytes, on a character boundary, and, when it cut, adds how
// many bytes s had.
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}
