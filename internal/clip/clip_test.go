package clip

import "testing"

func TestText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 4, "abcd… (11 bytes)"},
		{"aé", 2, "a… (3 bytes)"}, // é is two bytes: no half of it
		{"ééé", 1, "… (6 bytes)"},
	} {
		if got := Text(tc.s, tc.n); got != tc.want {
			t.Errorf("Text(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
