// Package labels holds the one rule for the labels that sandboxes, snapshots and
// nodes carry (key=value words that lists filter by and placement matches). It knows
// nothing else and imports nothing of Airlock, so that configuration and the manager
// check labels alike.
package labels

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Max is the most labels one thing may carry.
const Max = 64

var keyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9A-Z]([a-zA-Z0-9._/-]{0,62}[a-zA-Z0-9])?$`) })

// KeyRule and ValueRule say what a key and a value may be.
const (
	KeyRule   = "1 to 64 letters, digits, '.', '_', '/' or '-', starting and ending with a letter or digit"
	ValueRule = "at most 256 characters on one line"
)

// Check says what is wrong with labels, if anything: too many, a key outside KeyRule,
// or a value outside ValueRule.
func Check(labels map[string]string) error {
	if len(labels) > Max {
		return fmt.Errorf("too many labels (%d); at most %d", len(labels), Max)
	}
	for k, v := range labels {
		if !keyRE().MatchString(k) {
			return fmt.Errorf("invalid label key %q: %s", k, KeyRule)
		}
		if len(v) > 256 || strings.ContainsAny(v, "\x00\n") {
			return fmt.Errorf("invalid value for label %q: %s", k, ValueRule)
		}
	}
	return nil
}
