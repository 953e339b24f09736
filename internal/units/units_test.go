package units

import "testing"

func TestParseSizeFollowsDocker(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1048576": 1 << 20, "512M": 512 << 20, "512mb": 512 << 20, "512MiB": 512 << 20,
		"1G": 1 << 30, "1GB": 1 << 30, "1gib": 1 << 30, "1.5GiB": 3 << 29, " 2 T ": 2 << 40, "4k": 4096, "7b": 7,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1.5", "-1G", "1X", "1 GiBs", "2000000T", "1e3M"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		}
	}
}
